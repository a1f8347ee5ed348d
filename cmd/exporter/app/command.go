package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

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

// Command is the exporter's command line: flags, parsed into Options and
// completed, then run. The adapter's cmd/adapter/app has the same shape.
type Command struct {
	Options *Options
	flags   *pflag.FlagSet
	version bool
}

// NewCommand returns the exporter's command with every flag installed.
func NewCommand() *Command {
	c := &Command{Options: NewOptions(), flags: pflag.NewFlagSet("exporter", pflag.ContinueOnError)}
	c.Options.AddFlags(c.flags)
	c.flags.BoolVar(&c.version, "version", false, "Print the version and exit.")
	return c
}

// Flags are the command's flags.
func (c *Command) Flags() *pflag.FlagSet { return c.flags }

// Execute parses args, sets logging up to write to stderr (pkg/logging:
// klog's lines too), and serves until ctx is done. Errors in the command
// line wrap ErrUsage; --help returns pflag.ErrHelp.
func (c *Command) Execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c.flags.SetOutput(stderr)
	if err := c.flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usage{err}
	}
	if c.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Print("exporter"))
		return err
	}
	o := c.Options
	o.Complete()
	if err := o.Validate(); err != nil {
		return usage{fmt.Errorf("invalid flags:\n%w", err)}
	}
	log, err := o.Log.Setup(stderr)
	if err != nil {
		return usage{err}
	}
	if err := Run(ctx, o, log, nil); err != nil {
		log.Error("exporter stopped", "err", err)
		return err
	}
	return nil
}
