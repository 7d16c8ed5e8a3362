// Command sink is the benchmark's backend: it answers every request with an
// empty 200 after reading and discarding its body, so that a proxy in front of
// it, not the backend, is what a benchmark measures.
//
// Usage: sink -listen 127.0.0.1:18080
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"sync"
)

// bufs holds 64 KiB copy buffers; io.Copy would allocate 32 KiB per request.
var bufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "address to listen on")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bufs.Get().(*[]byte)
		// Read the whole body: a backend that answered before the upload
		// ended would let the proxy skip forwarding it.
		_, err := io.CopyBuffer(io.Discard, r.Body, *b)
		bufs.Put(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header()["Content-Length"] = []string{"0"}
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Addr: *listen, Handler: h}
	log.Fatal(srv.ListenAndServe())
}
