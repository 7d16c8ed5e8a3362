package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/wire"
)

// TestOpenAPIPools drives the pool API on a real fenceproxy, every answer
// checked against api/openapi.yaml: define, claim (granted and none free),
// a renew that asks for a hand-back after a join, done (stale, granted,
// retried, unknown), a shrink over held shards, the per-pool metrics.
func TestOpenAPIPools(t *testing.T) {
	s := loadOASSpec(t)
	in := startOASProxy(t, newOASBackend(), nil)
	C := oasControl
	lease := func(body []byte) wire.Lease {
		t.Helper()
		var l wire.Lease
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("lease answer %s: %v", body, err)
		}
		return l
	}
	oasRun(t, s, in, nil, []oasCase{
		{name: "define", listener: C, method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2}`, op: "definePool", status: 200, req: oasReqOK},
		{name: "bad definition", listener: C, method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2,"names":["a"]}`,
			op: "definePool", status: 400, req: oasReqOK},
		{name: "read an unknown pool", listener: C, method: "GET", target: "/v1/pools/nope", op: "getPool", status: 404, req: oasReqOK},
	})
	_, b1 := s.check(t, in, oasCase{listener: C, method: "POST", target: "/v1/pools/jobs/claim", body: `{"holder":"A","ttl":"10s"}`,
		op: "claimPoolShard", status: 201, req: oasReqOK})
	_, b2 := s.check(t, in, oasCase{listener: C, method: "POST", target: "/v1/pools/jobs/claim", body: `{"holder":"A","ttl":"10s"}`,
		op: "claimPoolShard", status: 201, req: oasReqOK})
	l1, l2 := lease(b1), lease(b2)
	if l1.Pool != "jobs" || l1.Shard == l2.Shard || l1.Name != "jobs/"+l1.Shard {
		t.Fatalf("claims %+v, %+v: want two shards of jobs", l1, l2)
	}
	resp, _ := s.check(t, in, oasCase{listener: C, method: "POST", target: "/v1/pools/jobs/claim", body: `{"holder":"B","ttl":"10s"}`,
		op: "claimPoolShard", status: 409, req: oasReqOK})
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("no_shard without Retry-After")
	}
	_, rb := s.check(t, in, oasCase{listener: C, method: "PUT", target: "/v1/leases/" + l1.Name,
		body: `{"holder":"A","token":"` + strconv.FormatUint(uint64(l1.Token), 10) + `"}`, op: "renewLease", status: 200, req: oasReqOK})
	if r := lease(rb); len(r.HandBack) != 1 || r.Pool != "jobs" {
		t.Fatalf("renew after B joined: %s; want one shard to hand back", rb)
	}
	oasRun(t, s, in, nil, []oasCase{
		{name: "shrink over held shards", listener: C, method: "PUT", target: "/v1/pools/jobs", body: `{"shards":1}`,
			op: "definePool", status: 409, req: oasReqOK},
		{name: "done with a stale token", listener: C, method: "POST", target: "/v1/pools/jobs/shards/" + l1.Shard + "/done",
			body: `{"holder":"A","token":"99"}`, op: "markPoolShardDone", status: 409, req: oasReqOK},
		{name: "done", listener: C, method: "POST", target: "/v1/pools/jobs/shards/" + l1.Shard + "/done",
			body: `{"holder":"A","token":"` + strconv.FormatUint(uint64(l1.Token), 10) + `"}`, op: "markPoolShardDone", status: 200, req: oasReqOK},
		{name: "done again (a retry)", listener: C, method: "POST", target: "/v1/pools/jobs/shards/" + l1.Shard + "/done",
			body: `{"holder":"A","token":"` + strconv.FormatUint(uint64(l1.Token), 10) + `"}`, op: "markPoolShardDone", status: 200, req: oasReqOK},
		{name: "done of an unknown shard", listener: C, method: "POST", target: "/v1/pools/jobs/shards/zz/done",
			body: `{"holder":"A","token":"1"}`, op: "markPoolShardDone", status: 404, req: oasReqOK},
		{name: "read", listener: C, method: "GET", target: "/v1/pools/jobs", op: "getPool", status: 200, req: oasReqOK},
	})
	_, pb := s.check(t, in, oasCase{listener: C, method: "GET", target: "/v1/pools/jobs", op: "getPool", status: 200, req: oasReqOK})
	var p wire.Pool
	if err := json.Unmarshal(pb, &p); err != nil || p.Done != 1 || p.Open != 1 || len(p.Shards) != 2 {
		t.Fatalf("pool %s: want 1 done, 1 open", pb)
	}
	// A pool with a prefix: its claim's lease is the shard's prefix; a
	// prefix change while it is held is pool_busy; a bad template is 400.
	oasRun(t, s, in, nil, []oasCase{
		{name: "define with a prefix", listener: C, method: "PUT", target: "/v1/pools/daily", body: `{"shards":1,"prefix":"reports/daily/{shard}/"}`,
			op: "definePool", status: 200, req: oasReqOK},
		{name: "bad prefix template", listener: C, method: "PUT", target: "/v1/pools/daily2", body: `{"shards":1,"prefix":"reports/{shard}"}`,
			op: "definePool", status: 400, req: oasReqBad},
	})
	_, pc := s.check(t, in, oasCase{listener: C, method: "POST", target: "/v1/pools/daily/claim", body: `{"holder":"A","ttl":"10s"}`,
		op: "claimPoolShard", status: 201, req: oasReqOK})
	if l := lease(pc); l.Name != "reports/daily/0/" || l.Pool != "daily" || l.Shard != "0" {
		t.Fatalf("claim in a pool with a prefix: %s; want the lease reports/daily/0/", pc)
	}
	oasRun(t, s, in, nil, []oasCase{
		{name: "prefix change while held", listener: C, method: "PUT", target: "/v1/pools/daily", body: `{"shards":1,"prefix":"reports/weekly/{shard}/"}`,
			op: "definePool", status: 409, req: oasReqOK},
		{name: "read a pool with a prefix", listener: C, method: "GET", target: "/v1/pools/daily", op: "getPool", status: 200, req: oasReqOK},
	})
	mresp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := mresp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, want := range []string{`fenceproxy_pool_claims_total{pool="jobs",result="granted"} 2`, `fenceproxy_pool_shards{pool="jobs",state="done"} 1`,
		`fenceproxy_pool_done_total{pool="jobs"} 1`, `fenceproxy_pool_holders{pool="jobs"}`} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
