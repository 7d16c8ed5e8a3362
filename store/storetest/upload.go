package storetest

import (
	"math"
	"time"
)

var uploadTests = []subtest{
	{"RecordsSurviveReopen", testUploadRecords},
	{"ReplaceAndDelete", testUploadReplaceDelete},
	{"Expiry", testUploadExpiry},
	{"TokenRange", testUploadRange},
	{"AfterClose", testUploadAfterClose},
}

// uploadKey names one upload record.
type uploadKey struct{ resource, id string }

// Records are found by resource and upload ID together (no pair aliases
// another, whatever bytes they hold), survive a reopen, and touch no maximum,
// lease or listing.
func testUploadRecords(r *rig) {
	t := r.t
	expires := time.Now().Add(time.Hour)
	want := map[uploadKey]uint64{
		{"bkt/a", "bc"}:          11,
		{"bkt/ab", "c"}:          12, // concatenations of the first
		{"bkt/a/b", "c"}:         13,
		{"bkt/a", "bc/d"}:        14,
		{"", "x"}:                15,
		{"a b/%2F/é", "id\x00z"}: 16,
		{"bkt/a", ""}:            17,
	}
	for k, tok := range want {
		if err := r.s.PutUpload(k.resource, k.id, tok, expires); err != nil {
			t.Fatalf("PutUpload(%q, %q, %d): %v", k.resource, k.id, tok, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for k, tok := range want {
			if got, found := r.upload(k.resource, k.id); !found || got != tok {
				t.Errorf("%s: Upload(%q, %q) = %d, %v; want %d, true", when, k.resource, k.id, got, found, tok)
			}
		}
		for _, k := range []uploadKey{{"bkt/a", "b"}, {"bkt/a", "bcd"}, {"bkt", "a/bc"}, {"bkt/ab", ""}} {
			if got, found := r.upload(k.resource, k.id); found {
				t.Errorf("%s: Upload(%q, %q) = %d, found; want no record", when, k.resource, k.id, got)
			}
		}
		if m := r.max("bkt/a"); m != 0 {
			t.Errorf("%s: Max(bkt/a) = %d with only upload records, want 0", when, m)
		}
		if got := r.list("", "", 100); len(got) != 0 {
			t.Errorf("%s: List = %v with only upload records, want none", when, got)
		}
		if got := r.leases(); len(got) != 0 {
			t.Errorf("%s: EachLease = %v with only upload records, want none", when, got)
		}
	}
	check("after PutUpload")
	r.restart()
	check("after reopen")
}

// A second Put replaces the token; DeleteUpload removes one record only,
// durably, and deleting what is not there is no error.
func testUploadReplaceDelete(r *rig) {
	t := r.t
	expires := time.Now().Add(time.Hour)
	for _, p := range []struct {
		id  string
		tok uint64
	}{{"u1", 41}, {"u1", 42}, {"u2", 43}} {
		if err := r.s.PutUpload("bkt/a", p.id, p.tok, expires); err != nil {
			t.Fatalf("PutUpload(bkt/a, %s, %d): %v", p.id, p.tok, err)
		}
	}
	if got, found := r.upload("bkt/a", "u1"); !found || got != 42 {
		t.Fatalf("after a second Put, Upload(bkt/a, u1) = %d, %v; want 42, true", got, found)
	}
	if err := r.s.DeleteUpload("bkt/a", "u1"); err != nil {
		t.Fatalf("DeleteUpload(bkt/a, u1): %v", err)
	}
	if err := r.s.DeleteUpload("bkt/a", "never"); err != nil {
		t.Fatalf("DeleteUpload of no record: %v, want nil", err)
	}
	r.restart()
	if got, found := r.upload("bkt/a", "u1"); found {
		t.Errorf("after DeleteUpload and a reopen, Upload(bkt/a, u1) = %d, found", got)
	}
	if got, found := r.upload("bkt/a", "u2"); !found || got != 43 {
		t.Errorf("a neighbour of the deleted record: Upload(bkt/a, u2) = %d, %v; want 43, true", got, found)
	}
}

// A record is gone once its expiry has passed, before a reopen and after.
func testUploadExpiry(r *rig) {
	t := r.t
	now := time.Now()
	if err := r.s.PutUpload("bkt/a", "past", 5, now.Add(-time.Second)); err != nil {
		t.Fatalf("PutUpload with an expiry in the past: %v", err)
	}
	if got, found := r.upload("bkt/a", "past"); found {
		t.Errorf("a record put already expired is found: %d", got)
	}
	soon := now.Add(1500 * time.Millisecond)
	if err := r.s.PutUpload("bkt/a", "soon", 6, soon); err != nil {
		t.Fatalf("PutUpload: %v", err)
	}
	if err := r.s.PutUpload("bkt/a", "later", 7, now.Add(time.Hour)); err != nil {
		t.Fatalf("PutUpload: %v", err)
	}
	if got, found := r.upload("bkt/a", "soon"); !found || got != 6 {
		t.Fatalf("before its expiry, Upload(bkt/a, soon) = %d, %v; want 6, true", got, found)
	}
	for deadline := soon.Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, found := r.upload("bkt/a", "soon"); !found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Upload(bkt/a, soon) still found a second after its expiry %s", soon.Format(time.RFC3339Nano))
		}
	}
	r.restart()
	if got, found := r.upload("bkt/a", "soon"); found {
		t.Errorf("an expired record is back after a reopen: %d", got)
	}
	if got, found := r.upload("bkt/a", "later"); !found || got != 7 {
		t.Errorf("Upload(bkt/a, later) = %d, %v; want 7, true", got, found)
	}
}

// Tokens up to 2^63-1 are recorded; above it, an error and nothing written.
func testUploadRange(r *rig) {
	t := r.t
	expires := time.Now().Add(time.Hour)
	if err := r.s.PutUpload("bkt/a", "max", math.MaxInt64, expires); err != nil {
		t.Fatalf("PutUpload(2^63-1): %v", err)
	}
	if got, found := r.upload("bkt/a", "max"); !found || got != math.MaxInt64 {
		t.Fatalf("Upload = %d, %v; want 2^63-1, true", got, found)
	}
	if err := r.s.PutUpload("bkt/a", "over", math.MaxInt64+1, expires); err == nil {
		t.Fatalf("PutUpload(2^63) = nil, want an error")
	}
	if got, found := r.upload("bkt/a", "over"); found {
		t.Fatalf("a refused PutUpload left a record: %d", got)
	}
}

// Every upload method fails after Close.
func testUploadAfterClose(r *rig) {
	t := r.t
	if err := r.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s := r.s
	r.s = nil
	if err := s.PutUpload("bkt/a", "u", 1, time.Now().Add(time.Hour)); err == nil {
		t.Errorf("PutUpload after Close = nil, want an error")
	}
	if _, _, err := s.Upload("bkt/a", "u"); err == nil {
		t.Errorf("Upload after Close = nil error, want one")
	}
	if err := s.DeleteUpload("bkt/a", "u"); err == nil {
		t.Errorf("DeleteUpload after Close = nil, want an error")
	}
}

func (r *rig) upload(resource, id string) (uint64, bool) {
	r.t.Helper()
	tok, found, err := r.s.Upload(resource, id)
	if err != nil {
		r.t.Fatalf("Upload(%q, %q): %v", resource, id, err)
	}
	return tok, found
}
