// Package tokenfile holds a bearer token read from a file that may appear,
// change or vanish while the process runs: a key of a Secret volume marked
// optional, which the kubelet fills within about a minute of the Secret's
// creation and updates in place (an atomic swap of the directory's ..data
// link). Both ends of the exporters' reserved lane read their token so
// (the exporter's --web.reserved-token-file, the adapter's
// --exporter-token-file): neither needs the token to start, and neither
// needs a restart when it comes or changes.
//
// The file's directory is watched (fsnotify), and the file is read again
// every Config.Resync as well, in case an event is lost or the directory
// appears only later.
package tokenfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Config configures a File.
type Config struct {
	// Path of the token file.
	Path string
	// MinLength is the shortest token accepted: a shorter one (an empty
	// file, say) is refused, logged and counted, and no token is held.
	MinLength int
	// Resync is how often the file is read even without an event
	// (default 1m).
	Resync time.Duration
	// Metric names the File's series: <Metric>_loaded and
	// <Metric>_errors_total.
	Metric string
	// What the token is for, in logs and help texts.
	What   string
	Clock  clock.WithTicker
	Logger *slog.Logger
}

// Reasons a read of the file fails, the errors counter's label values.
const (
	ReasonUnreadable = "unreadable"
	ReasonTooShort   = "too_short"
)

// File is the token a file holds now; see the package documentation.
type File struct {
	cfg   Config
	token atomic.Pointer[[]byte]

	// mu serialises reads of the file, so that the token held and the
	// state logged are those of the latest read.
	mu    sync.Mutex
	state string

	loaded prometheus.Gauge
	errors *prometheus.CounterVec
}

// New reads the file once and returns the File; a missing or bad file is
// no error (the File then holds no token until the file is good).
func New(cfg Config) (*File, error) {
	if cfg.Path == "" || cfg.Metric == "" {
		return nil, errors.New("tokenfile: Path and Metric are required")
	}
	if cfg.MinLength < 1 {
		cfg.MinLength = 1
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.What == "" {
		cfg.What = "token"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &File{cfg: cfg,
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: cfg.Metric + "_loaded",
			Help: fmt.Sprintf("1 while a %s of at least %d characters is read from its file, else 0 (the file is missing, short or unreadable).", cfg.What, cfg.MinLength),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: cfg.Metric + "_errors_total",
			Help: fmt.Sprintf("Reads of the %s's file that failed: unreadable (an error other than its absence; the last token is kept), too_short (no token is held).", cfg.What),
		}, []string{"reason"}),
	}
	for _, r := range []string{ReasonUnreadable, ReasonTooShort} {
		f.errors.WithLabelValues(r)
	}
	f.Reload()
	return f, nil
}

// Collectors are the File's metrics.
func (f *File) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.loaded, f.errors}
}

// Token is the token held now; nil while there is none. The caller must
// not change it.
func (f *File) Token() []byte {
	if p := f.token.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload reads the file now. A missing file clears the token (the Secret
// is gone, or not yet projected); a token shorter than MinLength clears it
// and is counted; any other read error is counted and keeps the last
// token, so that a transient failure does not close what works.
func (f *File) Reload() {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.set(nil)
		f.logState("absent", slog.LevelInfo, "no "+f.cfg.What+": its file does not exist", "path", f.cfg.Path)
	case err != nil:
		f.errors.WithLabelValues(ReasonUnreadable).Inc()
		f.logState("unreadable: "+err.Error(), slog.LevelError, f.cfg.What+" file unreadable; keeping the last token read", "path", f.cfg.Path, "err", err)
	default:
		tok := bytes.TrimSpace(b)
		if len(tok) < f.cfg.MinLength {
			f.set(nil)
			f.errors.WithLabelValues(ReasonTooShort).Inc()
			f.logState(fmt.Sprintf("short %d", len(tok)), slog.LevelError, f.cfg.What+" refused: too short to be secret", "path", f.cfg.Path,
				"characters", len(tok), "want at least", f.cfg.MinLength)
			return
		}
		if cur := f.Token(); bytes.Equal(cur, tok) {
			return
		}
		// Each new token is logged (never the token itself).
		replaced := f.Token() != nil
		f.set(tok)
		f.state = "loaded"
		f.cfg.Logger.Info(f.cfg.What+" loaded", "path", f.cfg.Path, "characters", len(tok), "replaced", replaced)
	}
}

func (f *File) set(tok []byte) {
	if tok == nil {
		f.token.Store(nil)
		f.loaded.Set(0)
		return
	}
	f.token.Store(&tok)
	f.loaded.Set(1)
}

// logState logs msg when the file's state differs from the last logged.
func (f *File) logState(state string, level slog.Level, msg string, args ...any) {
	if state == f.state {
		return
	}
	f.state = state
	f.cfg.Logger.Log(context.Background(), level, msg, args...)
}

// Run reloads the file on every change in its directory and every Resync
// until ctx is done.
func (f *File) Run(ctx context.Context) {
	w := f.watch()
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	f.Reload() // what changed before the watch began
	t := f.cfg.Clock.NewTicker(f.cfg.Resync)
	defer t.Stop()
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w != nil {
			events, errs = w.Events, w.Errors
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if w == nil {
				w = f.watch() // the directory may exist by now
			}
			f.Reload()
		case <-events:
			f.Reload()
		case err := <-errs:
			f.cfg.Logger.Warn("watching the "+f.cfg.What+" file's directory", "path", f.cfg.Path, "err", err)
		}
	}
}

// watch watches the file's directory, where the kubelet swaps a Secret's
// files in; nil when it cannot (Resync alone then reads the file).
func (f *File) watch() *fsnotify.Watcher {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(filepath.Dir(f.cfg.Path)); err == nil {
			return w
		}
		_ = w.Close()
	}
	f.cfg.Logger.Debug("cannot watch the "+f.cfg.What+" file's directory; reading it every resync", "path", f.cfg.Path, "every", f.cfg.Resync, "err", err)
	return nil
}
