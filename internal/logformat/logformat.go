// Package logformat gives the slog-logging binaries (the exporter,
// inferencesim) the adapter's log flag: --logging-format=text|json, as
// component-base names it, beside their --log.level.
package logformat

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// Options are the log flags.
type Options struct {
	Format string
	Level  string
}

// New returns the defaults: text at info, as the adapter logs.
func New() *Options { return &Options{Format: "text", Level: "info"} }

// AddFlags registers --logging-format and --log.level.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Format, "logging-format", o.Format, "Log format: text (key=value, as the adapter's klog text) or json (one object a line).")
	fs.StringVar(&o.Level, "log.level", o.Level, "Log level: debug, info, warn or error.")
}

// Logger writes to w in the chosen format and level.
func (o *Options) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.Level)); err != nil {
		return nil, fmt.Errorf("--log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--logging-format must be text or json, got %q", o.Format)
	}
}
