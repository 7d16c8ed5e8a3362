package badger

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	helperModeEnv = "TOKENSTORE_HELPER_MODE"
	helperDirEnv  = "TOKENSTORE_HELPER_DIR"
)

// crashKeys are the resources the crash helper raises.
var crashKeys = []string{"bkt/a", "", "bkt/part-0/objA", "x/y/z/"}

// TestHelperProcess is not a test: the process tests re-exec the test binary
// with helperModeEnv set to run it as a child process.
//
//	hold:  open the store, print "ready", keep it until stdin closes.
//	crash: open the store, raise crashKeys in a loop, print "<token> <quoted key>"
//	       after each Raise returns, until killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		t.Skip("helper for the re-exec tests; runs only in a child process")
	}
	dir := os.Getenv(helperDirEnv)
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(2)
	}
	switch mode {
	case "hold":
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		if err := s.Close(); err != nil {
			fmt.Printf("error: %v\n", err)
			os.Exit(2)
		}
		os.Exit(0)
	case "crash":
		next := make([]uint64, len(crashKeys))
		for i, k := range crashKeys {
			m, err := s.Max(k)
			if err != nil {
				fmt.Printf("error: %v\n", err)
				os.Exit(2)
			}
			next[i] = m + 1
		}
		for i := 0; ; i++ {
			k := i % len(crashKeys)
			got, err := s.Raise(crashKeys[k], next[k])
			if err != nil {
				fmt.Printf("error: %v\n", err)
				os.Exit(2)
			}
			// One write(2) per line, only after Raise returned.
			fmt.Printf("%d %q\n", got, crashKeys[k])
			next[k] = got + 1 + uint64(i%3)
		}
	}
	fmt.Printf("error: unknown mode %q\n", mode)
	os.Exit(2)
}

func helperCmd(t *testing.T, mode, dir string) *exec.Cmd {
	t.Helper()
	if testing.Short() {
		t.Skip("re-exec test skipped in -short mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestLockCrossProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := helperCmd(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child did not get ready: %q, %v", line, err)
	}

	s, err := Open(dir, Options{})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open succeeded while another process holds the dir")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another fenceproxy process") {
		t.Errorf("error %q should name %s and another fenceproxy process", err, dir)
	}

	// The child closes its store and exits; the lock must then be free.
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child exit: %v", err)
	}
	s = openT(t, dir)
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
}

// TestCrashDurability kills a raising child with SIGKILL at a random moment
// and checks that every value it reported (printed only after Raise
// returned) is covered by the maximum persisted on disk.
func TestCrashDurability(t *testing.T) {
	dir := t.TempDir()
	const cycles = 5
	for c := range cycles {
		printed := runAndKill(t, dir, time.Duration(rand.IntN(150)+10)*time.Millisecond)
		if len(printed) == 0 {
			t.Fatalf("cycle %d: child reported no raises", c)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("cycle %d: reopen after SIGKILL: %v", c, err)
		}
		for k, v := range printed {
			m, err := s.Max(k)
			if err != nil {
				t.Fatalf("cycle %d: Max(%q): %v", c, k, err)
			}
			if m < v {
				t.Errorf("cycle %d: Max(%q) = %d after crash, but the child reported %d as raised", c, k, m, v)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: %d keys checked, e.g. %q -> %d", c, len(printed), crashKeys[0], printed[crashKeys[0]])
	}
}

// runAndKill starts the crash helper, lets it raise for about d after its
// first report, SIGKILLs it and returns the largest reported value per key.
func runAndKill(t *testing.T, dir string, d time.Duration) map[string]uint64 {
	t.Helper()
	cmd := helperCmd(t, "crash", dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout) // a cut-off last line has no '\n' ...
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	printed := make(map[string]uint64)
	record := func(line string) {
		tok, q, ok := strings.Cut(line, " ")
		k, qerr := strconv.Unquote(q)
		v, perr := strconv.ParseUint(tok, 10, 64)
		if !ok || qerr != nil || perr != nil {
			// ... and so fails to parse here; only a complete line counts.
			if strings.HasPrefix(line, "error:") {
				t.Errorf("child: %s", line)
			}
			return
		}
		printed[k] = max(printed[k], v)
	}

	select {
	case line, ok := <-lines:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("child exited before reporting a raise")
		}
		record(line)
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("child reported nothing within 20s")
	}
	time.Sleep(d) // pacing: the child raises for d; the kill lands wherever it is
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for line := range lines { // drained up to EOF: the child is dead
		record(line)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child wait: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	return printed
}
