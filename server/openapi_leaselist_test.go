package server_test

import (
	"encoding/json"
	"testing"
)

// TestOpenAPIConformanceLeaseList drives the admin lease listing,
// GET /v1/leases: pages, filters and refusals, each checked against the spec.
func TestOpenAPIConformanceLeaseList(t *testing.T) {
	s := loadOASSpec(t)
	in := startOASProxy(t, newOASBackend(), map[string]string{"FENCEPROXY_ADMIN_TOKEN": "admin-secret"})
	const admin = "admin-secret"
	C := oasControl
	oasRun(t, s, in, nil, []oasCase{
		{name: "list with no leases", listener: C, method: "GET", target: "/v1/leases", bearer: admin, op: "listLeases", status: 200, req: oasReqOK},
		{name: "acquire a", listener: C, method: "POST", target: "/v1/leases/jobs/a", body: `{"holder":"A","ttl":"10s"}`,
			op: "acquireLease", status: 201, req: oasReqOK},
		{name: "acquire b", listener: C, method: "POST", target: "/v1/leases/jobs/b", body: `{"holder":"B","ttl":"10s"}`,
			op: "acquireLease", status: 201, req: oasReqOK},
		{name: "acquire other", listener: C, method: "POST", target: "/v1/leases/other", body: `{"holder":"C","ttl":"10s"}`,
			op: "acquireLease", status: 201, req: oasReqOK},
		{name: "force-release b", listener: C, method: "DELETE", target: "/v1/leases/jobs/b?force=true", bearer: admin,
			op: "releaseLease", status: 200, req: oasReqOK},
		{name: "list", listener: C, method: "GET", target: "/v1/leases", bearer: admin, op: "listLeases", status: 200, req: oasReqOK},
		{name: "list a page with next", listener: C, method: "GET", target: "/v1/leases?prefix=jobs/&limit=1", bearer: admin,
			op: "listLeases", status: 200, req: oasReqOK},
		{name: "list after", listener: C, method: "GET", target: "/v1/leases?prefix=jobs/&after=jobs/a&limit=1", bearer: admin,
			op: "listLeases", status: 200, req: oasReqOK},
		{name: "list with limit 0", listener: C, method: "GET", target: "/v1/leases?limit=0", bearer: admin, op: "listLeases", status: 400, req: oasReqBad},
		{name: "list with a bad limit", listener: C, method: "GET", target: "/v1/leases?limit=many", bearer: admin, op: "listLeases", status: 400, req: oasReqBad},
		{name: "list with a control byte in the prefix", listener: C, method: "GET", target: "/v1/leases?prefix=jobs%0A", bearer: admin,
			op: "listLeases", status: 400, req: oasReqOK},
		{name: "list without the admin bearer", listener: C, method: "GET", target: "/v1/leases", op: "listLeases", status: 401},
		{name: "list with a wrong bearer", listener: C, method: "GET", target: "/v1/leases", bearer: "nope", op: "listLeases", status: 401},
	})

	// What the pages hold.
	for _, tc := range []struct {
		target string
		want   []string // name holder state
		next   string
	}{
		{"/v1/leases", []string{"jobs/a A held", "jobs/b B released", "other C held"}, ""},
		{"/v1/leases?prefix=jobs/&limit=1", []string{"jobs/a A held"}, "jobs/a"},
		{"/v1/leases?prefix=jobs/&after=jobs/a&limit=1", []string{"jobs/b B released"}, "jobs/b"},
		{"/v1/leases?prefix=jobs/&after=jobs/b&limit=1", nil, ""},
	} {
		_, body := s.check(t, in, oasCase{listener: C, method: "GET", target: tc.target, bearer: admin, op: "listLeases", status: 200, req: oasReqOK})
		var page struct {
			Leases []struct{ Name, Holder, State string }
			Next   string
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("GET %s: %v: %s", tc.target, err, body)
		}
		var got []string
		for _, l := range page.Leases {
			got = append(got, l.Name+" "+l.Holder+" "+l.State)
		}
		if len(got) != len(tc.want) || page.Next != tc.next {
			t.Errorf("GET %s: leases %q next %q, want %q next %q", tc.target, got, page.Next, tc.want, tc.next)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("GET %s: leases %q, want %q", tc.target, got, tc.want)
				break
			}
		}
	}

	// Admin disabled: 403.
	off := startOASProxy(t, newOASBackend(), nil)
	oasRun(t, s, off, nil, []oasCase{
		{name: "list with admin disabled", listener: C, method: "GET", target: "/v1/leases", bearer: "anything", op: "listLeases", status: 403, req: oasReqOK},
	})
}
