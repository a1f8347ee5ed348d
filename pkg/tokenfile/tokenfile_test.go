package tokenfile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/tokenfile"
)

const (
	tokenA = "aaaaaaaaaaaaaaaaaaaa-token-a"
	tokenB = "bbbbbbbbbbbbbbbbbbbb-token-b"
)

// project writes token into dir as the kubelet writes a Secret volume:
// a new timestamped directory, the ..data link swapped onto it by a
// rename, and the key a link through ..data.
func project(t *testing.T, dir, token string, n int) {
	t.Helper()
	ts := "..2026_01_01_00_00_0" + strconv.Itoa(n)
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ts, "token"), []byte(token), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "token")); os.IsNotExist(err) {
		if err := os.Symlink("..data/token", filepath.Join(dir, "token")); err != nil {
			t.Fatal(err)
		}
	}
}

func newFile(t *testing.T, path string, clk *clocktesting.FakeClock) *tokenfile.File {
	t.Helper()
	cfg := tokenfile.Config{Path: path, MinLength: 16, Metric: "test_token", Resync: time.Hour}
	if clk != nil {
		cfg.Clock = clk
	}
	f, err := tokenfile.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func run(t *testing.T, f *tokenfile.File) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eventually(t *testing.T, what string, f *tokenfile.File, want string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return string(f.Token()) == want, nil
	}); err != nil {
		t.Fatalf("%s: token %q, want %q", what, f.Token(), want)
	}
}

// TestFileFollowsTheKubelet: an optional Secret volume, empty at start;
// the Secret is created, changed, and deleted, each projected the way the
// kubelet projects it. The File holds no token, then each token in turn,
// then none, without being asked to reload.
func TestFileFollowsTheKubelet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	f := newFile(t, path, nil)
	if f.Token() != nil {
		t.Fatalf("a token %q before the file exists", f.Token())
	}
	run(t, f)
	project(t, dir, tokenA+"\n", 1)
	eventually(t, "the Secret created", f, tokenA)
	project(t, dir, tokenB, 2)
	eventually(t, "the Secret changed", f, tokenB)
	for _, name := range []string{"token", "..data"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the Secret deleted", f, "")
	if got := testutil.ToFloat64(f.Collectors()[0]); got != 0 {
		t.Errorf("test_token_loaded %v after the file went, want 0", got)
	}
}

// TestFileReload: what each state of the file leaves held and counted.
func TestFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(s string) func(*testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove := func(t *testing.T) {
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
	}
	f := newFile(t, path, nil)
	steps := []struct {
		name                 string
		do                   func(*testing.T)
		want                 string
		unreadable, tooShort float64
	}{
		{"absent", remove, "", 0, 0},
		{"a token, spaces trimmed", write("  " + tokenA + "\n"), tokenA, 0, 0},
		// A directory where the file was: unreadable, the last token kept.
		{"unreadable", func(t *testing.T) {
			remove(t)
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, tokenA, 1, 0},
		{"too short", func(t *testing.T) { remove(t); write("short-token\n")(t) }, "", 1, 1},
		{"empty", write(""), "", 1, 2},
		{"a new token", write(tokenB), tokenB, 1, 2},
		{"gone", remove, "", 1, 2},
	}
	for _, s := range steps {
		s.do(t)
		f.Reload()
		if got := string(f.Token()); got != s.want {
			t.Errorf("%s: token %q, want %q", s.name, got, s.want)
		}
		loaded := testutil.ToFloat64(f.Collectors()[0])
		if want := map[bool]float64{true: 1, false: 0}[s.want != ""]; loaded != want {
			t.Errorf("%s: test_token_loaded %v, want %v", s.name, loaded, want)
		}
		errs := f.Collectors()[1]
		if err := testutil.CollectAndCompare(errs, strings.NewReader(fmt.Sprintf(`# HELP test_token_errors_total Reads of the token's file that failed: unreadable (an error other than its absence; the last token is kept), too_short (no token is held).
# TYPE test_token_errors_total counter
test_token_errors_total{reason="too_short"} %v
test_token_errors_total{reason="unreadable"} %v
`, s.tooShort, s.unreadable))); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}

// TestFileResync: the directory does not exist when the File starts (no
// watch is possible); it is read again every Resync, and the token found
// once the directory and file appear.
func TestFileResync(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	path := filepath.Join(dir, "token")
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFile(t, path, clk)
	run(t, f)
	// Run has read the file and found no directory to watch once it
	// waits on its ticker.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal("Run never waited on its ticker")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	project(t, dir, tokenA, 1)
	clk.Step(time.Hour)
	eventually(t, "a resync", f, tokenA)
	// The directory is watched from that resync on: a change needs no
	// further tick.
	project(t, dir, tokenB, 2)
	eventually(t, "the Secret changed", f, tokenB)
}
