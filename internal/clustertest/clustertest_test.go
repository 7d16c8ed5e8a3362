package clustertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/shard"
)

func put(t *testing.T, b *Backend, path, token, id string, body string, extra map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, b.URL()+path, strings.NewReader(body))
	req.Header.Set(HeaderToken, token)
	req.Header.Set(HeaderWriteID, id)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The backend applies whole bodies in the order it finishes them, counts
// decreasing tokens, honours X-Apply-Delay, and tells when a write's
// headers arrived.
func TestBackendAppliesWholeBodiesInOrder(t *testing.T) {
	b := NewBackend(t, 0)
	if st := put(t, b, "/a", "5", "w1", "x", nil); st != 200 {
		t.Fatalf("status %d", st)
	}
	began := time.Now()
	if st := put(t, b, "/a", "3", "w2", "y", map[string]string{HeaderApplyDelay: "200ms"}); st != 200 {
		t.Fatalf("status %d", st)
	}
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("X-Apply-Delay 200ms: answered after %v", d)
	}
	put(t, b, "/b", "1", "w3", "z", nil)
	if !b.WaitStarted("w3", time.Second) {
		t.Error("WaitStarted: w3's headers arrived, but it says not")
	}
	if b.WaitStarted("w-never", 10*time.Millisecond) {
		t.Error("WaitStarted: w-never never came")
	}
	got := b.Applies()
	if len(got) != 3 || got[0].Token != 5 || got[1].Token != 3 || got[1].ID != "w2" || got[2].Resource != "b" {
		t.Fatalf("applies %+v", got)
	}
	if b.Decreases() != 1 {
		t.Errorf("Decreases %d, want 1", b.Decreases())
	}
	if v := CheckApplied(got); len(v) != 1 || v[0].Check != CheckOrder || v[0].Resource != "a" {
		t.Errorf("CheckApplied: %v", v)
	}
}

// A body that ends before its Content-Length is not applied, though its
// headers arrived.
func TestBackendSkipsCutBodies(t *testing.T) {
	b := NewBackend(t, 0)
	addr := strings.TrimPrefix(b.URL(), "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Fencing-Token: 7\r\nX-Write-Id: wc\r\n\r\nhalf")
	if !b.WaitStarted("wc", 2*time.Second) {
		t.Fatal("the cut write's headers did not arrive")
	}
	c.Close()
	b.Wait(2*time.Second, func() bool { return b.Incomplete() != 0 })
	if b.Incomplete() != 1 || len(b.Applies()) != 0 {
		t.Errorf("a cut body: %d incomplete, applies %+v", b.Incomplete(), b.Applies())
	}
}

func at(base time.Time, ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// Each invariant of the checker catches its violation, and sequential,
// overlapping and equal-token histories pass.
func TestCheckers(t *testing.T) {
	t0 := time.Now()
	op := func(k Kind, tok uint64, start, end int) Op {
		return Op{Kind: k, Resource: "r", Token: tok, Start: at(t0, start), End: at(t0, end), Status: 200, Acked: true}
	}
	good := []Op{
		op(KindWrite, 1, 0, 10), op(KindWrite, 1, 5, 12), op(KindRaise, 3, 20, 30),
		op(KindLease, 4, 31, 40), op(KindWrite, 4, 41, 50),
		// overlapping: a write of 2 concurrent with the raise to 3 may be acknowledged
		op(KindWrite, 2, 15, 25),
		{Kind: KindWrite, Resource: "r", Token: 2, Start: at(t0, 60), End: at(t0, 61), Status: 409},
	}
	if v := CheckAcks(good); len(v) != 0 {
		t.Errorf("CheckAcks on a good history: %v", v)
	}
	cases := []struct {
		name string
		ops  []Op
		want string
	}{
		{"stale write acknowledged", []Op{op(KindRaise, 5, 0, 10), op(KindWrite, 4, 11, 20)}, CheckStaleAcked},
		{"lease token not above", []Op{op(KindWrite, 5, 0, 10), op(KindLease, 5, 11, 20)}, CheckLeaseOrder},
		{"raise answered below", []Op{op(KindLease, 5, 0, 10), op(KindRaise, 4, 11, 20)}, CheckRaiseLost},
		{"lease twice", []Op{op(KindLease, 5, 0, 10), op(KindLease, 5, 5, 20)}, CheckLeaseDup},
	}
	for _, c := range cases {
		v := CheckAcks(c.ops)
		if len(v) == 0 || v[0].Check != c.want {
			t.Errorf("%s: %v, want %s", c.name, v, c.want)
		}
	}

	applies := []Apply{{Resource: "r", Token: 2, ID: "a", At: at(t0, 35)}}
	if v := CheckAppliedAfterAcks(applies, good); len(v) != 1 || v[0].Check != CheckBelowAck {
		t.Errorf("a write of 2 applied after the raise to 3 was acknowledged: %v", v)
	}
	if v := CheckAppliedAfterAcks([]Apply{{Resource: "r", Token: 2, At: at(t0, 25)}}, good); len(v) != 0 {
		t.Errorf("applied before the raise answered: %v", v)
	}

	final := map[string]Final{"r": {Fence: 4, Lease: 4}}
	if v := CheckFinal(good, applies, final); len(v) != 0 {
		t.Errorf("CheckFinal on a good history: %v", v)
	}
	if v := CheckFinal(good, applies, map[string]Final{"r": {Fence: 3, Lease: 4}}); len(v) != 1 || v[0].Check != CheckFenceLost {
		t.Errorf("fence below an acknowledged token: %v", v)
	}
	if v := CheckFinal(good, applies, map[string]Final{"r": {Fence: 4, Lease: 3}}); len(v) != 1 || v[0].Check != CheckLeaseLost {
		t.Errorf("lease record below an acknowledged lease: %v", v)
	}
	if v := CheckFinal(good, []Apply{{Resource: "r", Token: 9}}, final); len(v) != 1 || v[0].Check != CheckAboveFence {
		t.Errorf("applied above the fence: %v", v)
	}
	if v := CheckFinal(good, nil, map[string]Final{"r": {Missing: "503"}}); len(v) != 1 || v[0].Check != CheckFenceMissing {
		t.Errorf("fence unreadable: %v", v)
	}
	// A write applied after the final reads is held against what etcd
	// stores.
	late := []Apply{{Resource: "r", Token: 9, At: at(t0, 60)}}
	if v := CheckStored(late, map[string]uint64{"r": 9}); len(v) != 0 {
		t.Errorf("applied at the stored maximum: %v", v)
	}
	if v := CheckStored(late, map[string]uint64{"r": 8}); len(v) != 1 || v[0].Check != CheckAboveStored {
		t.Errorf("applied above the stored maximum: %v", v)
	}
	if v := CheckStored(late, map[string]uint64{}); len(v) != 0 {
		t.Errorf("a resource whose maximum was not read: %v", v)
	}
}

// The fault machinery on a real 3-member etcd: the leader is found, stopped
// and continued, killed and restarted; a replica's proxies cut it off and
// restore it; a shard's owner key names a replica.
func TestEtcdFaultMachinery(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	var proxies []*etcdtest.Proxy
	var eps []string
	for _, m := range c.Members {
		p := etcdtest.NewProxy(t, m.ClientURL)
		proxies = append(proxies, p)
		eps = append(eps, p.URL())
	}
	r := &run{t: t, cfg: Config{Etcd: c, Shards: 16, Prefix: "/x/", Replicas: []Replica{fakeReplica("a"), fakeReplica("b")}},
		faults: map[string]int{}, resources: []string{"fault/r00"}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r.etcd = cli
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, ok := r.ownerOf(0); ok {
		t.Error("ownerOf without an owner key")
	}
	if _, err := cli.Put(ctx, "/x/shards/"+fmt.Sprint(shard.Of("fault/r00", 16))+"/owner", `{"id":"b","addr":"127.0.0.1:1"}`); err != nil {
		t.Fatal(err)
	}
	if o, ok := r.ownerOf(0); !ok || o != 1 {
		t.Errorf("ownerOf: %d %v, want replica 1", o, ok)
	}

	l, ok := r.leader()
	if !ok {
		t.Fatal("no leader found")
	}
	m := c.Members[l]
	if err := m.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !waitFor(15*time.Second, func() bool { nl, ok := r.leader(); return ok && nl != l }) {
		t.Fatal("no new leader while the old one is stopped")
	}
	if err := m.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	l, _ = r.leader()
	c.Members[l].Kill()
	if err := c.Members[l].Restart(); err != nil {
		t.Fatal(err)
	}

	// Through the proxies: works, cut hangs, restored works again.
	pc, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	get := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := pc.Get(ctx, "k")
		return err
	}
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("get through the proxies: %v", err)
	}
	for _, p := range proxies {
		p.Cut()
	}
	if err := get(time.Second); err == nil {
		t.Error("get through cut proxies answered")
	}
	for _, p := range proxies {
		p.Restore()
	}
	deadline := time.Now().Add(15 * time.Second)
	for get(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("get through restored proxies still fails")
		}
	}
}

type fakeReplica string

func (f fakeReplica) ID() string                  { return string(f) }
func (f fakeReplica) ProxyURL() string            { return "" }
func (f fakeReplica) ControlURL() string          { return "" }
func (f fakeReplica) Signal(syscall.Signal) error { return nil }
func (f fakeReplica) Kill()                       {}
func (f fakeReplica) Restart() error              { return nil }

// rawPut opens a TCP connection to b and sends a PUT's headers and the first
// part of its body; the caller ends the connection as the test needs.
func rawPut(t *testing.T, b *Backend, path, token, id string, length int, extra map[string]string, body string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var h strings.Builder
	fmt.Fprintf(&h, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: %s\r\n%s: %s\r\n", path, length, HeaderToken, token, HeaderWriteID, id)
	for k, v := range extra {
		fmt.Fprintf(&h, "%s: %s\r\n", k, v)
	}
	h.WriteString("\r\n")
	h.WriteString(body)
	if _, err := io.WriteString(c, h.String()); err != nil {
		t.Fatal(err)
	}
	if !b.WaitStarted(id, 2*time.Second) {
		t.Fatalf("%s: its headers did not reach the backend", id)
	}
	return c.(*net.TCPConn)
}

// reset closes c with a reset (SO_LINGER 0), as the proxy closes its
// upstream connections.
func reset(t *testing.T, c *net.TCPConn) {
	t.Helper()
	if err := c.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// statusLine reads the first line of the answer on c, within d.
func statusLine(c net.Conn, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var line []byte
	buf := make([]byte, 1)
	for {
		if _, err := c.Read(buf); err != nil {
			return string(line), err
		}
		if buf[0] == '\n' {
			return strings.TrimSpace(string(line)), nil
		}
		line = append(line, buf[0])
	}
}

// waitFor polls cond every 10ms for at most d: for etcd's processes, which
// signal no event here.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// A lenient backend takes an orderly close (FIN) mid-body for the body's
// end, as versitygw does: it applies what arrived, marked Truncated, and
// CheckTruncatedApplies reports it. A strict one does not apply it.
func TestLenientBackendAppliesBodyCutByFIN(t *testing.T) {
	for _, lenient := range []bool{true, false} {
		t.Run(fmt.Sprintf("lenient=%v", lenient), func(t *testing.T) {
			b := NewBackendWith(t, BackendOptions{Lenient: lenient})
			c := rawPut(t, b, "/cut", "41", "w41", 100, nil, "half of it")
			if err := c.CloseWrite(); err != nil { // FIN; the answer can still be read
				t.Fatal(err)
			}
			line, err := statusLine(c, 5*time.Second)
			if err != nil {
				t.Fatalf("no answer after the FIN: %v (read %q)", err, line)
			}
			applies := b.Applies()
			if !lenient {
				if !strings.Contains(line, " 400 ") || len(applies) != 0 || b.Incomplete() != 1 {
					t.Fatalf("strict backend: answer %q, applies %+v, %d incomplete; want 400, none, 1", line, applies, b.Incomplete())
				}
				return
			}
			if !strings.Contains(line, " 200 ") {
				t.Errorf("answer %q, want 200 (a lenient store answers the truncated write)", line)
			}
			if len(applies) != 1 || !applies[0].Truncated || applies[0].Bytes != int64(len("half of it")) || applies[0].Token != 41 || applies[0].ID != "w41" {
				t.Fatalf("applies %+v, want token 41 truncated at %d bytes", applies, len("half of it"))
			}
			if b.Incomplete() != 0 {
				t.Errorf("%d incomplete, want 0", b.Incomplete())
			}
			v := CheckTruncatedApplies(applies)
			if len(v) != 1 || v[0].Check != CheckTruncated || v[0].Resource != "cut" || !strings.Contains(v[0].Detail, "10 bytes") {
				t.Errorf("CheckTruncatedApplies: %v", v)
			}
			if v := CheckTruncatedApplies([]Apply{{Resource: "r", Token: 1, Bytes: 10}}); len(v) != 0 {
				t.Errorf("CheckTruncatedApplies on a whole body: %v", v)
			}
			if !strings.Contains(b.String(), "1 of them cut short by a FIN") {
				t.Errorf("String: %s", b)
			}
		})
	}
}

// A reset mid-body stops a lenient backend: nothing applied.
func TestLenientBackendDropsBodyCutByReset(t *testing.T) {
	b := NewBackendWith(t, BackendOptions{Lenient: true})
	c := rawPut(t, b, "/cut", "41", "w41", 100, nil, "half of it")
	if !b.WaitStarted("w41", 5*time.Second) { // its headers, and the bytes sent with them, are in
		t.Fatal("the write's headers did not arrive")
	}
	reset(t, c)
	if !b.Wait(5*time.Second, func() bool { return b.Incomplete() == 1 }) {
		t.Fatalf("a reset body: %d incomplete, want 1", b.Incomplete())
	}
	time.Sleep(200 * time.Millisecond) // asserting nothing happens: no apply follows
	if a := b.Applies(); len(a) != 0 {
		t.Fatalf("a body cut by a reset was applied: %+v", a)
	}
}

// X-Answer-Delay: a lenient backend holds a whole body before applying it;
// a reset meanwhile makes it give the write up (at once, not at the end of
// the delay), a FIN does not.
func TestLenientBackendAnswerDelay(t *testing.T) {
	const hold = 1500 * time.Millisecond
	t.Run("reset", func(t *testing.T) {
		b := NewBackendWith(t, BackendOptions{Lenient: true})
		c := rawPut(t, b, "/held", "41", "w41", 8, map[string]string{HeaderAnswerDelay: hold.String()}, "41412345")
		time.Sleep(200 * time.Millisecond) // no event: the backend reads the body whole, then holds it
		began := time.Now()
		reset(t, c)
		if !b.Wait(hold, func() bool { return b.Incomplete() == 1 }) {
			t.Fatalf("reset while held: %d incomplete after %v, want 1 within the hold", b.Incomplete(), time.Since(began))
		}
		if d := time.Since(began); d > hold/2 {
			t.Errorf("gave up %v after the reset, want well within the hold of %v", d, hold)
		}
		time.Sleep(hold) // asserting nothing happens: no apply at the hold's end
		if a := b.Applies(); len(a) != 0 {
			t.Fatalf("a held write whose connection was reset was applied: %+v", a)
		}
	})
	t.Run("FIN", func(t *testing.T) {
		b := NewBackendWith(t, BackendOptions{Lenient: true})
		began := time.Now()
		c := rawPut(t, b, "/held", "41", "w41", 8, map[string]string{HeaderAnswerDelay: hold.String()}, "41412345")
		time.Sleep(200 * time.Millisecond) // no event: the backend reads the body whole, then holds it
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		line, err := statusLine(c, 5*time.Second)
		if err != nil || !strings.Contains(line, " 200 ") {
			t.Fatalf("answer %q, %v; want 200", line, err)
		}
		a := b.Applies()
		if len(a) != 1 || a[0].Truncated || a[0].Bytes != 8 || a[0].Token != 41 {
			t.Fatalf("applies %+v, want 41 whole", a)
		}
		if d := a[0].At.Sub(began); d < hold {
			t.Errorf("applied %v after it was sent, want at least the hold %v", d, hold)
		}
	})
	t.Run("strict ignores it", func(t *testing.T) {
		b := NewBackendWith(t, BackendOptions{})
		began := time.Now()
		if st := put(t, b, "/held", "41", "w41", "41412345", map[string]string{HeaderAnswerDelay: hold.String()}); st != 200 {
			t.Fatalf("status %d", st)
		}
		if d := time.Since(began); d >= hold {
			t.Errorf("a strict backend held the write %v", d)
		}
	})
}

// X-Read-Rate: the backend reads the body at most that fast, so that the
// sender's socket buffers fill.
func TestBackendReadRate(t *testing.T) {
	const size, rate = 48 << 10, 32 << 10
	b := NewBackendWith(t, BackendOptions{Lenient: true})
	began := time.Now()
	if st := put(t, b, "/slow", "7", "w7", strings.Repeat("x", size), map[string]string{HeaderReadRate: fmt.Sprint(rate)}); st != 200 {
		t.Fatalf("status %d", st)
	}
	took := time.Since(began)
	// The last read of at most 4 KiB starts once all but it was read at
	// the rate.
	if min := time.Duration(float64(size-4096) / rate * float64(time.Second)); took < min {
		t.Errorf("%d bytes at %d B/s read in %v, want at least %v", size, rate, took, min)
	}
	if max := 3 * time.Duration(float64(size)/rate*float64(time.Second)); took > max {
		t.Errorf("%d bytes at %d B/s read in %v, want well under %v", size, rate, took, max)
	}
	if a := b.Applies(); len(a) != 1 || a[0].Bytes != size || a[0].Truncated {
		t.Fatalf("applies %+v", a)
	}
}

// X-Read-Pause: the backend stops reading once it read X-Read-Pause-At
// bytes of the body, for that long, then reads the rest and applies it.
func TestBackendReadPause(t *testing.T) {
	const size, at, pause = 64 << 10, 16 << 10, 800 * time.Millisecond
	b := NewBackendWith(t, BackendOptions{Lenient: true})
	began := time.Now()
	if st := put(t, b, "/paused", "7", "w7", strings.Repeat("x", size),
		map[string]string{HeaderReadPause: pause.String(), HeaderReadPauseAt: fmt.Sprint(at)}); st != 200 {
		t.Fatalf("status %d", st)
	}
	if took := time.Since(began); took < pause || took > pause+time.Second {
		t.Errorf("a body read with a pause of %v took %v", pause, took)
	}
	if a := b.Applies(); len(a) != 1 || a[0].Bytes != size || a[0].Truncated {
		t.Fatalf("applies %+v", a)
	}
	// Without a pause the same body is read at once.
	began = time.Now()
	put(t, b, "/paused", "8", "w8", strings.Repeat("x", size), nil)
	if took := time.Since(began); took > pause/2 {
		t.Errorf("a body read without a pause took %v", took)
	}
}
