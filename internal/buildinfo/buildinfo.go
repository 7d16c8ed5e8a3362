// Package buildinfo reads what the Go toolchain stamped into the running
// binary (runtime/debug.ReadBuildInfo): the main module's version, the VCS
// commit it was built from and whether the tree had uncommitted changes, and
// the Go version. `go build` in a git checkout stamps the commit; a build
// with -buildvcs=false, from a source archive or in a git worktree (the go
// command looks for a .git directory) stamps none.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Unknown is the value of a field the binary carries no information for.
const Unknown = "unknown"

// Stamped is a version given at link time, for builds the go command
// stamps none into (-buildvcs=false, a source archive, a container build
// without .git): go build -ldflags="-X
// github.com/fenceproxy/fenceproxy/internal/buildinfo.Stamped=v1.2.3". It
// takes the place of "(devel)", not of a version the go command stamped.
var Stamped string

// Info is the build information of a binary.
type Info struct {
	// Version is the main module's version: a release tag (v1.2.3), a
	// pseudo-version derived from the commit (v0.0.0-20260101120000-abcdef123456,
	// with +dirty for a modified tree), or "(devel)" when the go command
	// stamped none.
	Version string
	// Revision is the VCS commit (vcs.revision, a full git hash); "" when
	// none was stamped.
	Revision string
	// Time is the commit's time (vcs.time, RFC 3339); "" when not stamped.
	Time string
	// Modified reports uncommitted changes in the tree at build time
	// (vcs.modified); false when not stamped.
	Modified bool
	// GoVersion is the Go toolchain that built the binary, e.g. go1.26.8.
	GoVersion string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From returns the build information of bi (ok as ReadBuildInfo's): a
// version of "(devel)" and the running Go version for what bi lacks.
func From(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if Stamped != "" {
		info.Version = Stamped
	}
	if !ok || bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "(devel)" && Stamped != "" {
		info.Version = Stamped
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// RevisionOrUnknown is Revision, or Unknown when none was stamped (for
// metric labels and log lines, where an empty value reads as missing).
func (i Info) RevisionOrUnknown() string {
	if i.Revision == "" {
		return Unknown
	}
	return i.Revision
}

// String is the text of `fenceproxy version`: the version on the first
// line, then the revision (with its time and whether the tree was
// modified) and the Go version and platform, one per line.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fenceproxy %s\n", i.Version)
	if i.Revision == "" {
		fmt.Fprintf(&b, "revision:  %s (built without VCS information)\n", Unknown)
		if i.Version == "(devel)" {
			b.WriteString("           (build in a git checkout, or stamp a version: go build -ldflags=\"-X github.com/fenceproxy/fenceproxy/internal/buildinfo.Stamped=v1.2.3\")\n")
		}
	} else {
		fmt.Fprintf(&b, "revision:  %s\n", i.Revision)
		if i.Time != "" {
			fmt.Fprintf(&b, "committed: %s\n", i.Time)
		}
		fmt.Fprintf(&b, "modified:  %t\n", i.Modified)
	}
	fmt.Fprintf(&b, "go:        %s %s/%s\n", i.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
