package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpuscale/gpuscale/pkg/buildinfo"
)

// ErrUsage marks an error in the command line (bad flags or arguments):
// errors.Is(err, ErrUsage).
var ErrUsage = errors.New("usage")

// usage is an error in the command line: its message is err's alone.
type usage struct{ err error }

func (u usage) Error() string        { return u.err.Error() }
func (u usage) Unwrap() error        { return u.err }
func (u usage) Is(target error) bool { return target == ErrUsage }

// Command is the adapter's command line: flags, parsed into the adapter's
// options (custom-metrics-apiserver's and gpuscale's) and the logging
// configuration, then run. `adapter recommend` is a client command with
// flags of its own (RunRecommend).
type Command struct {
	Adapter *Adapter
	logging *logsapi.LoggingConfiguration
	version bool
}

// NewCommand returns the adapter's command with every flag installed.
func NewCommand() *Command {
	c := &Command{Adapter: NewAdapter()}
	fs := c.Adapter.Flags()
	// component-base's logging flags: --logging-format=text|json, -v,
	// --vmodule, as every Kubernetes component has them.
	c.logging = LoggingFlags(fs)
	fs.AddGoFlagSet(flag.CommandLine)
	fs.BoolVar(&c.version, "version", false, "Print the version and exit.")
	return c
}

// Execute parses args, sets logging up to write to stderr, and serves
// until ctx is done. Errors in the command line are ErrUsage; --help
// returns pflag.ErrHelp.
func (c *Command) Execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "recommend" {
		return RunRecommend(ctx, args[1:], stdout)
	}
	c.Adapter.Flags().SetOutput(stderr)
	if err := c.Adapter.Flags().Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usage{fmt.Errorf("parsing flags: %w", err)}
	}
	log, err := ApplyLogging(c.logging, stderr)
	if err != nil {
		return usage{fmt.Errorf("logging flags: %w", err)}
	}
	if c.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Print("adapter"))
		return err
	}
	c.Adapter.Log = log
	// Served on the adapter's /metrics with the apiserver's own series.
	legacyregistry.RawMustRegister(buildinfo.Collector())
	return c.Adapter.Run(ctx)
}
