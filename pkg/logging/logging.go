// Package logging is gpuscale's one logging setup. Code logs through
// log/slog; klog, which client-go, custom-metrics-apiserver and the
// apiserver library log through, is routed into the same slog handler
// (Route), so that every line of a binary comes out in one format.
//
// The exporter and inferencesim take --logging-format and --log.level
// (Options); the adapter takes component-base's logging flags
// (--logging-format, -v, --vmodule) and builds its handler with Handler.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// The formats --logging-format accepts, as component-base names them.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Options are the log flags.
type Options struct {
	Format string
	Level  string
}

// New returns the defaults: text at info, as the adapter logs.
func New() *Options { return &Options{Format: FormatText, Level: "info"} }

// AddFlags registers --logging-format and --log.level.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Format, "logging-format", o.Format, "Log format: text (key=value, as the adapter logs) or json (one object a line).")
	fs.StringVar(&o.Level, "log.level", o.Level, "Log level: debug, info, warn or error.")
}

// Logger writes to w in the chosen format and level. It changes no global
// state: Setup is Logger plus Route.
func (o *Options) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.Level)); err != nil {
		return nil, fmt.Errorf("--log.level: %w", err)
	}
	h, err := Handler(w, o.Format, level)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// Setup is a binary's logging setup: the logger the flags ask for, with
// klog's and slog's default output routed into it.
func (o *Options) Setup(w io.Writer) (*slog.Logger, error) {
	log, err := o.Logger(w)
	if err != nil {
		return nil, err
	}
	Route(log)
	return log, nil
}

// Handler is the slog handler of a format, writing to w the records at
// level and above.
func Handler(w io.Writer, format string, level slog.Leveler) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case FormatText:
		return slog.NewTextHandler(w, opts), nil
	case FormatJSON:
		return slog.NewJSONHandler(w, opts), nil
	default:
		return nil, fmt.Errorf("--logging-format must be text or json, got %q", format)
	}
}

// Route makes log's handler the output of klog (client-go's, the apiserver
// library's and klog.InfoS lines: klog.V(n) becomes slog level -n) and of
// slog's default logger (and so of the standard library's log package).
func Route(log *slog.Logger) {
	klog.SetSlogLogger(log)
	slog.SetDefault(log)
}
