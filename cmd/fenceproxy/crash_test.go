package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Environment variables of TestCrashCycles (read by the test, not passed on
// to the child process).
const (
	crashCyclesEnv = "FENCEPROXY_TEST_CRASH_CYCLES" // number of SIGKILL cycles
	crashSeedEnv   = "FENCEPROXY_TEST_CRASH_SEED"   // replays a logged seed
)

// crashDefaultCycles is the number of cycles without FENCEPROXY_TEST_CRASH_CYCLES.
const crashDefaultCycles = 50

// crashResources are the resources written during each cycle; writers and
// lease acquires share them, so lease fence-ahead and write raises interleave.
var crashResources = []string{"bkt/crash/r0", "bkt/crash/r1", "bkt/crash/r2", "bkt/crash/r3"}

const (
	crashWriters     = 4                      // concurrent writer goroutines per cycle
	crashMaxRun      = 400 * time.Millisecond // longest write phase before the kill
	crashLeaseHolder = "crash-holder"         // one holder: its re-acquire gets a new token at once
)

// crashLedger is what the clients were told: the tokens acknowledged with a
// 2xx (writes) or a 201 (lease acquires), per resource.
type crashLedger struct {
	mu          sync.Mutex
	ackedMax    map[string]uint64 // largest acknowledged token (write or lease)
	leaseMax    map[string]uint64 // largest token of an acknowledged lease acquire
	ackedWrites int
	ackedLeases int
	stale       int // 409 stale answers while writing (contention, expected)
}

func (l *crashLedger) ackWrite(resource string, tok uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ackedWrites++
	l.ackedMax[resource] = max(l.ackedMax[resource], tok)
}

func (l *crashLedger) ackLease(resource string, tok uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ackedLeases++
	l.ackedMax[resource] = max(l.ackedMax[resource], tok)
	l.leaseMax[resource] = max(l.leaseMax[resource], tok)
}

func (l *crashLedger) refused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stale++
}

func (l *crashLedger) maxOf(resource string) (acked, lease uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ackedMax[resource], l.leaseMax[resource]
}

// crashSettings reads the cycle count and the seed from the environment.
func crashSettings(t *testing.T) (cycles int, seed uint64) {
	t.Helper()
	cycles = crashDefaultCycles
	if s := os.Getenv(crashCyclesEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", crashCyclesEnv, s)
		}
		cycles = n
	}
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", crashSeedEnv, s)
		}
		seed = n
	}
	return cycles, seed
}

// waitReady polls GET /readyz on control until it answers 200 (bounded by 20s).
func waitReady(t *testing.T, p *fpProcess, client *http.Client) {
	t.Helper()
	// Another process: only its /readyz shows that it is ready.
	var err error
	if !servertest.Within(20*time.Second, func() bool {
		var resp *http.Response
		if resp, err = client.Get("http://" + p.Control + "/readyz"); err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("/readyz on %s not 200 within 20s (last error %v)\nstderr:\n%s", p.Control, err, p.Stderr)
	}
}

// acquireLease is POST /v1/leases/<resource> for holder; it returns the
// status and, on 201, the issued token.
func acquireLease(client *http.Client, control, resource, holder string) (int, uint64, error) {
	body := fmt.Sprintf(`{"holder":%q,"ttl":"10s"}`, holder)
	resp, err := client.Post("http://"+control+"/v1/leases/"+resource, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, 0, nil
	}
	var l struct{ Token string }
	if err := json.Unmarshal(raw, &l); err != nil {
		return resp.StatusCode, 0, fmt.Errorf("acquire answer %s: %w", raw, err)
	}
	tok, err := strconv.ParseUint(l.Token, 10, 64)
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("acquire answer token %q: %w", l.Token, err)
	}
	return resp.StatusCode, tok, nil
}

// leaseToken reads the token of GET /v1/leases/<resource>; 0 when the lease
// was never acquired (404).
func leaseToken(t *testing.T, client *http.Client, control, resource string) uint64 {
	t.Helper()
	resp, err := client.Get("http://" + control + "/v1/leases/" + resource)
	if err != nil {
		t.Fatalf("GET /v1/leases/%s: %v", resource, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var l struct{ Token string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &l) != nil {
		t.Fatalf("GET /v1/leases/%s: status %d\n%s", resource, resp.StatusCode, raw)
	}
	return servertest.MustUint(t, l.Token)
}

// TestCrashCycles: tokens acknowledged by the real binary survive SIGKILL at
// random moments. All cycles share one DATA_DIR. Each cycle starts the binary,
// waits for /readyz and checks, per resource, that every token acknowledged
// before the earlier kills (a 2xx write, or a 201 lease acquire, whose token
// fence-ahead made durable) is at most the persisted maximum, that the lease
// record kept its last acknowledged token, that a write below an acknowledged
// token gets 409 without reaching the backend, and that the holder of the
// maximum can still write with it. Then concurrent writers with rising tokens
// and a lease acquirer run for a random 0-400 ms, and the process is killed
// with SIGKILL while writes are in flight. At the end the backend must have
// received each resource's writes in non-decreasing token order.
//
// FENCEPROXY_TEST_CRASH_CYCLES sets the number of cycles (default 50);
// FENCEPROXY_TEST_CRASH_SEED replays the random choices of a logged seed
// (goroutine scheduling is not replayed).
func TestCrashCycles(t *testing.T) {
	cycles, seed := crashSettings(t)
	t.Logf("%d cycles, seed %d (replay the choices with %s=%d)", cycles, seed, crashSeedEnv, seed)
	began := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0))

	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), t.TempDir())
	// After a start-up, larger tokens wait ABANDON_GRACE for writes the killed
	// process may have left at the backend; 50ms keeps that path in play
	// without slowing the cycles (the default would be 5s).
	env["FENCEPROXY_ABANDON_GRACE"] = "50ms"

	ledger := &crashLedger{ackedMax: map[string]uint64{}, leaseMax: map[string]uint64{}}
	// next[i] is the last token handed to a writer for crashResources[i]:
	// tokens rise across cycles and are never reused.
	next := make([]atomic.Uint64, len(crashResources))
	raiseNext := func(i int, tok uint64) {
		for {
			cur := next[i].Load()
			if cur >= tok || next[i].CompareAndSwap(cur, tok) {
				return
			}
		}
	}
	var kills, losses, killsInFlight, cutRequests int

	for cycle := 0; cycle <= cycles; cycle++ {
		client := servertest.NewClient(t)
		p := startProcess(t, env)
		p.waitServing(t)
		waitReady(t, p, client)
		base := "http://" + p.Proxy

		// What was acknowledged before the kills is durable.
		for i, r := range crashResources {
			acked, leaseAcked := ledger.maxOf(r)
			m := servertest.FenceMax(t, client, p.Control, r)
			if acked > m {
				losses++
				t.Errorf("cycle %d: token %d on %s was acknowledged before SIGKILL, but the persisted maximum after restart is %d", cycle, acked, r, m)
			}
			if lt := leaseToken(t, client, p.Control, r); leaseAcked > lt {
				losses++
				t.Errorf("cycle %d: lease token %d on %s was acknowledged before SIGKILL, but the lease record after restart has %d", cycle, leaseAcked, r, lt)
			}
			if acked > 0 {
				servertest.AssertStale(t, client, backend, base, "/"+r, acked-1, m, fmt.Sprintf("stale-%d-%s", cycle, r))
			}
			if m > 0 { // the holder of the maximum writes again (a retry after the restart)
				tok := strconv.FormatUint(m, 10)
				if st, _ := servertest.PutToken(t, client, base, "/"+r, tok, fmt.Sprintf("again-%d-%s", cycle, r)); st/100 != 2 {
					t.Errorf("cycle %d: PUT %s with the persisted maximum %d: status %d, want 2xx", cycle, r, m, st)
				} else {
					ledger.ackWrite(r, m)
				}
			}
			raiseNext(i, m)
		}
		if t.Failed() || cycle == cycles {
			p.cmd.Process.Kill()
			<-p.exited
			break
		}

		var killed atomic.Bool // set just before the kill: later transport errors are expected
		var inflight atomic.Int64
		var started servertest.Signal // notified as a request starts
		var wg sync.WaitGroup
		// unexpected reports a failure unless the process is being killed.
		unexpected := func(format string, args ...any) {
			if !killed.Load() {
				t.Errorf("cycle %d: "+format, append([]any{cycle}, args...)...)
			}
		}
		for w := range crashWriters {
			wrng := rand.New(rand.NewPCG(seed, uint64(cycle*(crashWriters+1)+w+1)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !killed.Load() {
					i := wrng.IntN(len(crashResources))
					r, tok := crashResources[i], next[i].Add(1)
					id := fmt.Sprintf("w%d-%d-%s-%d", w, cycle, r, tok)
					inflight.Add(1)
					started.Notify()
					resp, body, err := servertest.DoPut(client, base, "/"+r, strconv.FormatUint(tok, 10), id)
					inflight.Add(-1)
					switch {
					case err != nil:
						unexpected("writer %d: PUT %s token %d: %v", w, r, tok, err)
						return
					case resp.StatusCode/100 == 2:
						ledger.ackWrite(r, tok)
					case resp.StatusCode == http.StatusConflict && resp.Header.Get("Fencing-Refused") == "stale":
						// A larger token (another writer's, or a lease's) got there first.
						ledger.refused()
					default:
						unexpected("writer %d: PUT %s token %d: status %d\n%s", w, r, tok, resp.StatusCode, body)
						return
					}
				}
			}()
		}
		// The lease acquirer: each 201 is an acknowledged token; it then
		// writes with it, as a holder would.
		lrng := rand.New(rand.NewPCG(seed, uint64(cycle*(crashWriters+1))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !killed.Load() {
				i := lrng.IntN(len(crashResources))
				r := crashResources[i]
				before, _ := ledger.maxOf(r)
				inflight.Add(1)
				started.Notify()
				st, tok, err := acquireLease(client, p.Control, r, crashLeaseHolder)
				inflight.Add(-1)
				if err != nil || st != http.StatusCreated {
					unexpected("acquire %s: status %d, %v", r, st, err)
					return
				}
				if tok <= before {
					t.Errorf("cycle %d: acquire %s issued token %d, not above the acknowledged %d", cycle, r, tok, before)
				}
				ledger.ackLease(r, tok)
				raiseNext(i, tok)
				id := fmt.Sprintf("lease-%d-%s-%d", cycle, r, tok)
				inflight.Add(1)
				started.Notify()
				resp, body, err := servertest.DoPut(client, base, "/"+r, strconv.FormatUint(tok, 10), id)
				inflight.Add(-1)
				switch {
				case err != nil:
					unexpected("lease holder: PUT %s token %d: %v", r, tok, err)
					return
				case resp.StatusCode/100 == 2:
					ledger.ackWrite(r, tok)
				case resp.StatusCode == http.StatusConflict && resp.Header.Get("Fencing-Refused") == "stale":
					ledger.refused() // a writer's larger token got there first
				default:
					unexpected("lease holder: PUT %s token %d: status %d\n%s", r, tok, resp.StatusCode, body)
					return
				}
			}
		}()

		time.Sleep(time.Duration(rng.Int64N(int64(crashMaxRun) + 1))) // paces the load: a random run before the kill
		// Land the kill with requests in flight (the writers start them back
		// to back, so this waits at most a few scheduler slices).
		started.Wait(time.Second, func() bool { return inflight.Load() > 0 })
		killed.Store(true)
		if n := inflight.Load(); n > 0 {
			killsInFlight++
			cutRequests += int(n)
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatalf("cycle %d: SIGKILL: %v", cycle, err)
		}
		kills++
		<-p.exited
		wg.Wait()
		client.CloseIdleConnections()
	}

	backend.CheckOrder(t)
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	for _, r := range crashResources {
		if ledger.ackedMax[r] == 0 {
			t.Errorf("no token on %s was ever acknowledged: the cycles tested nothing there", r)
		}
	}
	if killsInFlight == 0 {
		t.Error("no kill landed with requests in flight")
	}
	t.Logf("%d SIGKILL cycles in %v (seed %d): %d writes and %d lease tokens acknowledged, %d stale refusals under contention, "+
		"%d losses; %d kills landed with requests in flight (%d requests in flight at the kills)",
		kills, time.Since(began).Round(time.Millisecond), seed, ledger.ackedWrites, ledger.ackedLeases, ledger.stale,
		losses, killsInFlight, cutRequests)
}
