package app

import (
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/gpuscale/gpuscale/pkg/logging"
)

// jsonFormat makes component-base accept --logging-format=json (behind the
// LoggingBetaOptions gate, on by default, as its own JSON format is) with
// gpuscale's JSON handler, instead of linking zap for it.
type jsonFormat struct{}

func (jsonFormat) Create(c logsapi.LoggingConfiguration, o logsapi.LoggingOptions) (logr.Logger, logsapi.RuntimeControl) {
	h, _ := logging.Handler(o.ErrorStream, logging.FormatJSON, verbosityLevel(c))
	return logr.FromSlogHandler(h), logsapi.RuntimeControl{}
}

func init() {
	if err := logsapi.RegisterLogFormat(logging.FormatJSON, jsonFormat{}, logsapi.LoggingBetaOptions); err != nil {
		panic(err)
	}
}

// LoggingFlags registers component-base's logging flags on fs, as every
// Kubernetes component has them: --logging-format=text|json, -v and
// --vmodule. ApplyLogging applies what they say once parsed.
func LoggingFlags(fs *pflag.FlagSet) *logsapi.LoggingConfiguration {
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(c, fs)
	return c
}

// ApplyLogging checks the logging flags, sets klog's verbosity by them
// (-v, --vmodule), and returns the adapter's logger, writing to w, with
// klog (the apiserver library's and client-go's lines) and slog's default
// routed into it (pkg/logging): one format for every line.
func ApplyLogging(c *logsapi.LoggingConfiguration, w io.Writer) (*slog.Logger, error) {
	gates := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gates); err != nil {
		return nil, err
	}
	if err := logsapi.ValidateAndApplyWithOptions(c, &logsapi.LoggingOptions{ErrorStream: w, InfoStream: w}, gates); err != nil {
		return nil, err
	}
	h, err := logging.Handler(w, c.Format, verbosityLevel(*c))
	if err != nil {
		return nil, err
	}
	log := slog.New(h)
	logging.Route(log)
	return log, nil
}

// verbosityLevel lets klog.V(n) lines through when -v is n or more: klog
// logs them at slog level -n.
func verbosityLevel(c logsapi.LoggingConfiguration) slog.Level {
	return slog.Level(-int(c.Verbosity))
}
