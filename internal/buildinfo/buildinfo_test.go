package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/fenceproxy/fenceproxy", Version: "v0.0.0-20261201131829-ab48401f5ce8+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "ab48401f5ce81d343229b92108e5ec6682f49ae9"},
			{Key: "vcs.time", Value: "2026-12-01T13:18:29Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name  string
		bi    *debug.BuildInfo
		ok    bool
		want  Info
		lines []string // in String, in this order
	}{
		{"stamped", stamped, true,
			Info{Version: "v0.0.0-20261201131829-ab48401f5ce8+dirty", Revision: "ab48401f5ce81d343229b92108e5ec6682f49ae9",
				Time: "2026-12-01T13:18:29Z", Modified: true, GoVersion: "go1.26.8"},
			[]string{"fenceproxy v0.0.0-20261201131829-ab48401f5ce8+dirty", "revision:  ab48401f5ce81d343229b92108e5ec6682f49ae9",
				"committed: 2026-12-01T13:18:29Z", "modified:  true", "go:        go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH}},
		{"a checkout built without VCS stamping", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true,
			Info{Version: "(devel)", GoVersion: "go1.26.8"},
			[]string{"fenceproxy (devel)", "revision:  unknown (built without VCS information)", "go:        go1.26.8"}},
		{"no build info", nil, false, Info{Version: "(devel)", GoVersion: runtime.Version()},
			[]string{"fenceproxy (devel)", "revision:  unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(tc.bi, tc.ok)
			if got != tc.want {
				t.Fatalf("From = %+v, want %+v", got, tc.want)
			}
			text := got.String()
			at := 0
			for _, l := range tc.lines {
				i := strings.Index(text[at:], l)
				if i < 0 {
					t.Fatalf("String() lacks %q after offset %d:\n%s", l, at, text)
				}
				at += i + len(l)
			}
			if want := tc.want.Revision; want == "" && got.RevisionOrUnknown() != Unknown || want != "" && got.RevisionOrUnknown() != want {
				t.Errorf("RevisionOrUnknown = %q", got.RevisionOrUnknown())
			}
		})
	}
}

// A version stamped at link time replaces "(devel)", never a version the go
// command stamped; without either, the text says how to get one.
func TestStamped(t *testing.T) {
	defer func(s string) { Stamped = s }(Stamped)
	Stamped = ""
	if s := From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true).String(); !strings.Contains(s, "buildinfo.Stamped=") {
		t.Errorf("a (devel) build without VCS information does not say how to stamp a version:\n%s", s)
	}
	Stamped = "v0.9.0"
	if v := From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true).Version; v != "v0.9.0" {
		t.Errorf("stamped over (devel): %q, want v0.9.0", v)
	}
	if v := From(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true).Version; v != "v1.2.3" {
		t.Errorf("stamped over the go command's v1.2.3: %q", v)
	}
	if v := From(nil, false).Version; v != "v0.9.0" {
		t.Errorf("no build info: %q, want the stamped v0.9.0", v)
	}
}
