// Package build checks the container build files (Dockerfile, .dockerignore)
// without a container engine: it parses the Dockerfile by hand and replays
// the builder stage's `go build` on the host.
package build

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	repoRoot   = ".." // this package lives in <repo>/build
	binaryPath = "/fenceproxy"
	mainPkg    = "./cmd/fenceproxy"
)

type instruction struct {
	cmd  string // upper-cased keyword: FROM, RUN, ...
	args string // rest of the logical line, continuations joined
	line int
}

type stage struct {
	image string
	name  string
	insts []instruction
}

type dockerfile struct {
	globalArgs []instruction // ARGs before the first FROM
	stages     []stage
}

// parseDockerfile is a small parser of the Dockerfile subset in use: comments,
// backslash line continuations, one instruction per logical line. Heredocs are
// not supported (and not used).
func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var df dockerfile
	var cur strings.Builder
	start := 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		kw, rest, _ := strings.Cut(text, " ")
		in := instruction{cmd: strings.ToUpper(kw), args: strings.TrimSpace(rest), line: start}
		if in.cmd == "FROM" {
			df.stages = append(df.stages, parseFrom(t, in))
			return
		}
		if len(df.stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
			}
			df.globalArgs = append(df.globalArgs, in)
			return
		}
		s := &df.stages[len(df.stages)-1]
		s.insts = append(s.insts, in)
	}
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimRight(raw, " \t\r")
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue // comments (and parser directives) may sit inside continuations too
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return df
}

func parseFrom(t *testing.T, in instruction) stage {
	t.Helper()
	var words []string
	for _, w := range strings.Fields(in.args) {
		if !strings.HasPrefix(w, "--") { // --platform=...
			words = append(words, w)
		}
	}
	switch {
	case len(words) == 1:
		return stage{image: words[0]}
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		return stage{image: words[0], name: words[2]}
	}
	t.Fatalf("Dockerfile:%d: cannot parse FROM %q", in.line, in.args)
	return stage{}
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.insts {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// shellWords splits a shell-form command into words, honouring single and
// double quotes and backslash escapes. It fails on shell operators, which
// would make "the go build command" ambiguous.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.ContainsRune("\"\\$`", rune(s[i+1])) {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case strings.ContainsRune(";&|<>()`$", rune(c)):
			return nil, fmt.Errorf("shell operator or expansion %q in %q", c, s)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// commandWords returns the words of a RUN/ENTRYPOINT in exec (JSON) or shell form.
func commandWords(args string) ([]string, error) {
	if strings.HasPrefix(args, "[") {
		var words []string
		err := json.Unmarshal([]byte(args), &words)
		return words, err
	}
	return shellWords(args)
}

// stageEnv evaluates the ARG and ENV instructions of a stage the way BuildKit
// does: ARGs without a value take the global default or, for the automatic
// platform ARGs, the target platform (here: linux on the host's architecture).
func stageEnv(t *testing.T, df dockerfile, s stage) map[string]string {
	t.Helper()
	auto := map[string]string{
		"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH, "TARGETPLATFORM": "linux/" + runtime.GOARCH,
		"BUILDOS": "linux", "BUILDARCH": runtime.GOARCH, "BUILDPLATFORM": "linux/" + runtime.GOARCH,
	}
	globals := map[string]string{}
	for _, in := range df.globalArgs {
		for _, a := range strings.Fields(in.args) {
			k, v, _ := strings.Cut(a, "=")
			globals[k] = v
		}
	}
	vars := map[string]string{}
	for _, in := range s.insts {
		switch in.cmd {
		case "ARG":
			for _, a := range strings.Fields(in.args) {
				k, v, hasDefault := strings.Cut(a, "=")
				switch g, isGlobal := globals[k]; {
				case hasDefault:
					vars[k] = os.Expand(v, func(n string) string { return vars[n] })
				case isGlobal:
					vars[k] = g
				default:
					vars[k] = auto[k]
				}
			}
		case "ENV":
			words, err := shellWordsWithVars(in.args)
			if err != nil {
				t.Fatalf("Dockerfile:%d: %v", in.line, err)
			}
			if len(words) == 2 && !strings.Contains(words[0], "=") { // legacy ENV key value
				words = []string{words[0] + "=" + words[1]}
			}
			pending := map[string]string{}
			for _, w := range words {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					t.Fatalf("Dockerfile:%d: ENV word %q is not key=value", in.line, w)
				}
				// All values of one ENV see the variables as they were before it.
				pending[k] = os.Expand(v, func(n string) string { return vars[n] })
			}
			for k, v := range pending {
				vars[k] = v
			}
		}
	}
	return vars
}

// shellWordsWithVars is shellWords for ENV values, where $VAR is expanded
// later rather than rejected.
func shellWordsWithVars(s string) ([]string, error) {
	const dollar = "\x00"
	words, err := shellWords(strings.ReplaceAll(s, "$", dollar))
	for i := range words {
		words[i] = strings.ReplaceAll(words[i], dollar, "$")
	}
	return words, err
}

type buildPlan struct {
	builder  stage
	final    stage
	env      map[string]string // builder stage's ENV plus inline VAR=value of the RUN
	argv     []string          // go build ...
	output   string            // value of -o
	outIndex int               // index in argv of the -o value
}

func plan(t *testing.T) buildPlan {
	t.Helper()
	df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	if len(df.stages) < 2 {
		t.Fatalf("want a multi-stage build (>= 2 FROM), got %d stage(s)", len(df.stages))
	}
	p := buildPlan{final: df.stages[len(df.stages)-1]}
	found := 0
	for _, s := range df.stages[:len(df.stages)-1] {
		for _, in := range s.all("RUN") {
			if !strings.Contains(in.args, "go build") {
				continue
			}
			found++
			words, err := commandWords(in.args)
			if err != nil {
				t.Fatalf("Dockerfile:%d: %v", in.line, err)
			}
			p.builder = s
			p.env = stageEnv(t, df, s)
			for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
				k, v, _ := strings.Cut(words[0], "=")
				p.env[k] = v
				words = words[1:]
			}
			p.argv = words
		}
	}
	if found != 1 {
		t.Fatalf("want exactly one RUN with `go build` in a non-final stage, found %d", found)
	}
	if len(p.argv) < 2 || p.argv[0] != "go" || p.argv[1] != "build" {
		t.Fatalf("builder RUN is not a plain `go build`: %q", p.argv)
	}
	for i, w := range p.argv {
		if w == "-o" && i+1 < len(p.argv) {
			p.output, p.outIndex = p.argv[i+1], i+1
		}
	}
	if p.output == "" {
		t.Fatalf("go build has no `-o <path>`: %q", p.argv)
	}
	return p
}

func TestDockerfile(t *testing.T) {
	p := plan(t)

	t.Run("builder", func(t *testing.T) {
		img := p.builder.image
		if !strings.HasPrefix(img, "golang:1.26") || strings.Contains(img, "latest") {
			t.Errorf("builder image %q: want a pinned golang:1.26 tag", img)
		}
		if got := p.env["CGO_ENABLED"]; got != "0" {
			t.Errorf("builder CGO_ENABLED=%q, want 0 (static binary)", got)
		}
		if !slices.Contains(p.argv, "-trimpath") {
			t.Errorf("go build lacks -trimpath: %q", p.argv)
		}
		if !slices.Contains(p.argv, "-ldflags=-s -w") && !hasPair(p.argv, "-ldflags", "-s -w") {
			t.Errorf(`go build lacks -ldflags="-s -w": %q`, p.argv)
		}
		if p.argv[len(p.argv)-1] != mainPkg {
			t.Errorf("go build builds %q, want %s", p.argv[len(p.argv)-1], mainPkg)
		}
	})

	t.Run("final stage", func(t *testing.T) {
		f := p.final
		if f.image != "gcr.io/distroless/static-debian12:nonroot" && f.image != "scratch" {
			t.Errorf("final image %q: want distroless static nonroot or scratch", f.image)
		}
		users := f.all("USER")
		if len(users) == 0 {
			t.Fatal("final stage has no USER: it would run as root")
		}
		user, _, _ := strings.Cut(users[len(users)-1].args, ":")
		if user == "" || user == "0" || user == "root" {
			t.Errorf("final stage runs as %q, want a non-root user", users[len(users)-1].args)
		}

		var ports []string
		for _, in := range f.all("EXPOSE") {
			for _, port := range strings.Fields(in.args) {
				ports = append(ports, strings.TrimSuffix(port, "/tcp"))
			}
		}
		for _, want := range []string{"8080", "9090"} {
			if !slices.Contains(ports, want) {
				t.Errorf("EXPOSE %v lacks %s", ports, want)
			}
		}

		eps := f.all("ENTRYPOINT")
		if len(eps) == 0 {
			t.Fatal("final stage has no ENTRYPOINT")
		}
		ep := eps[len(eps)-1]
		if !strings.HasPrefix(ep.args, "[") {
			t.Errorf("ENTRYPOINT %s: want exec (JSON) form, so signals reach the binary", ep.args)
		}
		words, err := commandWords(ep.args)
		if err != nil || len(words) == 0 || words[0] != binaryPath {
			t.Errorf("ENTRYPOINT %s: want [%q] (err %v)", ep.args, binaryPath, err)
		}

		// The binary at the entrypoint is the one the builder produced.
		builderRef := p.builder.name
		copied := false
		for _, in := range f.all("COPY") {
			words := strings.Fields(in.args)
			if slices.Contains(words, "--from="+builderRef) && len(words) >= 2 &&
				words[len(words)-2] == p.output && words[len(words)-1] == binaryPath {
				copied = true
			}
		}
		if !copied {
			t.Errorf("final stage has no `COPY --from=%s %s %s`", builderRef, p.output, binaryPath)
		}

		dataDir := stageEnv(t, dockerfile{}, f)["FENCEPROXY_DATA_DIR"]
		if dataDir == "" {
			t.Fatal("final stage does not set FENCEPROXY_DATA_DIR (the binary requires it)")
		}
		var volumes []string
		for _, in := range f.all("VOLUME") {
			words, err := commandWords(in.args)
			if err != nil {
				t.Fatalf("Dockerfile:%d: %v", in.line, err)
			}
			volumes = append(volumes, words...)
		}
		if !slices.Contains(volumes, dataDir) && !slices.Contains(volumes, dataDir+"/") {
			t.Errorf("FENCEPROXY_DATA_DIR=%s is not a VOLUME (%v): with a read-only root it must be mounted", dataDir, volumes)
		}
	})
}

func hasPair(argv []string, flag, value string) bool {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag && argv[i+1] == value {
			return true
		}
	}
	return false
}

// TestDockerignoreKeepsBuildInputs checks that .dockerignore does not drop
// go.mod, go.sum or any non-test Go source from the build context.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		re     *regexp.Regexp
		negate bool
	}
	var rules []rule
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, negate := strings.CutPrefix(line, "!")
		pattern = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(pattern)), "/")
		rules = append(rules, rule{re: ignorePattern(pattern), negate: negate})
	}
	excluded := func(rel string) bool {
		ex := false
		for _, r := range rules {
			// A pattern matching a parent directory excludes everything below it.
			for p := rel; p != "."; p = filepath.Dir(p) {
				if r.re.MatchString(p) {
					ex = !r.negate
					break
				}
			}
		}
		return ex
	}
	need := []string{"go.mod", "go.sum"}
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel(repoRoot, path)
			need = append(need, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range need {
		if excluded(rel) {
			t.Errorf(".dockerignore excludes %s, which the build needs", rel)
		}
	}
}

// ignorePattern converts a .dockerignore pattern (filepath.Match syntax plus
// `**` for any number of directories) to a regexp over slash paths.
func ignorePattern(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if strings.HasPrefix(p[i:], "**/") {
				b.WriteString("(?:.*/)?")
				i += 2
			} else if strings.HasPrefix(p[i:], "**") {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// TestDockerBuildCommand runs the builder stage's exact `go build` (its env,
// from the repo root, which the Dockerfile copies to its WORKDIR) and checks
// that the result is a static, stripped executable that prints its help.
func TestDockerBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	p := plan(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "fenceproxy")
	argv := slices.Clone(p.argv)
	argv[p.outIndex] = out

	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Env = os.Environ()
	for k, v := range p.env {
		cmd.Env = append(cmd.Env, k+"="+v) // later entries win
	}
	t.Logf("running %q with CGO_ENABLED=%s GOOS=%s GOARCH=%s", argv, p.env["CGO_ENABLED"], p.env["GOOS"], p.env["GOARCH"])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("output is not ELF: %v", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Errorf("ELF type %v, want ET_EXEC (a static, non-PIE executable)", f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("binary has a PT_INTERP header: it needs a dynamic loader")
		}
	}
	if libs, err := f.DynString(elf.DT_NEEDED); err != nil || len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v (err %v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary has a .symtab: -ldflags=-s did not apply")
	}
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("binary has DWARF section %s: -ldflags=-w did not apply", s.Name)
			break
		}
	}
	if b, err := os.ReadFile(out); err != nil {
		t.Fatal(err)
	} else if bytes.Contains(b, []byte(root+string(filepath.Separator))) {
		t.Errorf("binary contains the build directory %s: -trimpath did not apply", root)
	}

	if runtime.GOOS != "linux" {
		t.Skipf("cannot run a linux binary on %s", runtime.GOOS)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, out, "-h")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEPROXY_") {
			run.Env = append(run.Env, kv)
		}
	}
	b, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v\n%s", out, err, b)
	}
	if !bytes.Contains(b, []byte("FENCEPROXY_UPSTREAM")) {
		t.Errorf("%s -h does not mention FENCEPROXY_UPSTREAM:\n%s", out, b)
	}
}
