// Package docs holds the project's documents; its test keeps
// ARCHITECTURE.md's package table true to the code.
package docs

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/fenceproxy/fenceproxy"

// exempt are trees the table does not list: benchmarks and examples are
// described in prose beside it.
var exempt = []string{"bench/", "examples/"}

type listed struct {
	ImportPath   string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// goList returns the module's packages by path relative to the module.
func goList(t *testing.T) map[string]listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[rel(p.ImportPath)] = p
	}
	return pkgs
}

func rel(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

// project keeps the imports of the module itself, by relative path.
func project(imports []string) []string {
	var out []string
	for _, i := range imports {
		if i == module || strings.HasPrefix(i, module+"/") {
			out = append(out, rel(i))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

type row struct {
	line    int
	imports []string // imports the row names for the package's code
	tests   []string // imports the row marks "(tests)"
}

var (
	name = regexp.MustCompile("`([^`]+)`( \\(tests\\))?")
	note = regexp.MustCompile(`\([^()]*\)`)
)

// table parses the rows of the "## Packages" table: `package` | provides |
// imports of the project (backticked names, "none" for none).
func table(t *testing.T) map[string]row {
	t.Helper()
	f, err := os.Open("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]row{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 {
			t.Fatalf("ARCHITECTURE.md:%d: a row needs three cells: %q", n, line)
		}
		pkg := strings.Trim(strings.TrimSpace(cells[0]), "`")
		r := row{line: n}
		// A parenthesis other than "(tests)" is a note: its names are not imports.
		cell := note.ReplaceAllStringFunc(cells[len(cells)-1], func(s string) string {
			if s == "(tests)" {
				return s
			}
			return ""
		})
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			if m[2] != "" {
				r.tests = append(r.tests, m[1])
			} else {
				r.imports = append(r.imports, m[1])
			}
		}
		sort.Strings(r.imports)
		if _, dup := rows[pkg]; dup {
			t.Errorf("ARCHITECTURE.md:%d: %s has two rows", n, pkg)
		}
		rows[pkg] = r
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("ARCHITECTURE.md: no rows under ## Packages")
	}
	return rows
}

// TestPackageTable checks that every package with code has a row, that
// every row names a package, and that a row's imports are the package's
// imports of the project: the next drift fails here.
func TestPackageTable(t *testing.T) {
	pkgs := goList(t)
	rows := table(t)
	for path, p := range pkgs {
		if len(p.GoFiles) == 0 || slices.ContainsFunc(exempt, func(e string) bool { return strings.HasPrefix(path, e) }) {
			continue
		}
		r, ok := rows[path]
		if !ok {
			t.Errorf("ARCHITECTURE.md: no row for package %s (imports %v)", path, project(p.Imports))
			continue
		}
		if want := project(p.Imports); !slices.Equal(r.imports, want) {
			t.Errorf("ARCHITECTURE.md:%d: %s imports %v of the project, the row says %v", r.line, path, want, r.imports)
		}
		tests := project(append(slices.Clone(p.TestImports), p.XTestImports...))
		for _, ti := range r.tests {
			if !slices.Contains(tests, ti) {
				t.Errorf("ARCHITECTURE.md:%d: %s's tests do not import %s", r.line, path, ti)
			}
		}
	}
	for path, r := range rows {
		p, ok := pkgs[path]
		if !ok || len(p.GoFiles) == 0 {
			t.Errorf("ARCHITECTURE.md:%d: row for %s, which is not a package with code", r.line, path)
		}
	}
}
