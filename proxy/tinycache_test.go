package proxy_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

// TestTinyCacheProxyNeverReordersWrites: the proxy over a store with four
// cache entries and many resources, random tokens from many writers: the
// backend never sees a token below one it already applied on a resource.
func TestTinyCacheProxyNeverReordersWrites(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{CacheBytes: 4 * 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	last := map[string]uint64{}
	var applied, violations atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		tok, _ := strconv.ParseUint(r.Header.Get("X-Fencing-Token"), 10, 64)
		mu.Lock()
		if tok < last[r.URL.Path] {
			violations.Add(1)
			t.Errorf("backend: token %d on %s after %d", tok, r.URL.Path, last[r.URL.Path])
		}
		last[r.URL.Path] = max(last[r.URL.Path], tok)
		mu.Unlock()
		applied.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	b, err := fence.New(s, fence.Options{DrainTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opts := proxy.DefaultOptions()
	opts.Upstream = u
	p, err := proxy.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	client := front.Client()
	const resources = 12
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range 60 {
				res := rng.IntN(resources)
				tok := rng.Uint64N(40)
				req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/bkt/o-%d", front.URL, res), strings.NewReader("x"))
				req.Header.Set("X-Fencing-Token", strconv.FormatUint(tok, 10))
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("PUT: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusConflict {
					t.Errorf("PUT token %d: status %d", tok, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if applied.Load() == 0 {
		t.Fatal("no write reached the backend")
	}
	t.Logf("%d writes applied, %d out of order", applied.Load(), violations.Load())
}
