// Command reverseproxy is the benchmark's stock Go baseline: a plain
// net/http/httputil.ReverseProxy on a pooled, keep-alive http.Transport,
// configured as a careful user would and otherwise left as shipped.
//
// Usage: reverseproxy -listen 127.0.0.1:18081 -upstream http://127.0.0.1:18080
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:18080", "backend base URL")
	idle := flag.Int("idle", 1024, "idle upstream connections kept (MaxIdleConns and MaxIdleConnsPerHost); keep it >= the load's connections")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatalf("-upstream: %v", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The default of 2 idle connections per host would make most requests
	// dial a new upstream connection under 64 concurrent clients.
	tr.MaxIdleConns = *idle
	tr.MaxIdleConnsPerHost = *idle
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // as fenceproxy does: the backend sees the client's Host
		},
		Transport: tr,
	}
	log.Fatal((&http.Server{Addr: *listen, Handler: rp}).ListenAndServe())
}
