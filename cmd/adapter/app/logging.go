package app

import (
	"context"
	"io"
	"log/slog"
	"strings"

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
	log := slog.New(quietAbandonedDiscovery{h})
	logging.Route(log)
	return log, nil
}

// quietAbandonedDiscovery logs at debug, not error, the generic API
// server's two lines for a discovery request whose client went away
// before the answer was written out: "Timeout or abort while handling"
// and "Post-timeout activity". The aggregator's availability check of
// each APIService sends its discovery GET several times at once and drops
// the attempts that lose, every 30 s or so: with --v=3 they show as
// answered in milliseconds, 200, by the aggregator's Go-http-client. Left
// at error they are a few error lines a minute on a healthy adapter, which
// users of every custom metrics adapter ask about (prometheus-adapter
// #473, k8s-stackdriver #545). A discovery answer is a static list, so no
// real timeout hides among them; the same lines for a metric request
// (a longer path) stay errors, and every abort is still counted in
// apiserver_request_aborts_total on /metrics.
type quietAbandonedDiscovery struct{ slog.Handler }

func (h quietAbandonedDiscovery) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && abandonedDiscovery(r) {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietAbandonedDiscovery) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietAbandonedDiscovery{h.Handler.WithAttrs(attrs)}
}

func (h quietAbandonedDiscovery) WithGroup(name string) slog.Handler {
	return quietAbandonedDiscovery{h.Handler.WithGroup(name)}
}

// abandonedDiscovery says whether r is one of the generic API server's
// lines for an aborted request (k8s.io/apiserver's server/filters) on a
// discovery path.
func abandonedDiscovery(r slog.Record) bool {
	var key string
	switch r.Message {
	case "Timeout or abort while handling":
		key = "URI"
	case "Post-timeout activity":
		key = "path"
	default:
		return false
	}
	discovery := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			discovery = discoveryPath(a.Value.String())
			return false
		}
		return true
	})
	return discovery
}

// discoveryPath says whether uri names an API server's discovery: /api or
// /apis and up to a group and version under them, /openapi/..., /version.
func discoveryPath(uri string) bool {
	path, _, _ := strings.Cut(uri, "?")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch parts[0] {
	case "apis":
		return len(parts) <= 3
	case "api":
		return len(parts) <= 2
	case "openapi":
		return true
	case "version":
		return len(parts) == 1
	}
	return false
}

// verbosityLevel lets klog.V(n) lines through when -v is n or more: klog
// logs them at slog level -n.
func verbosityLevel(c logsapi.LoggingConfiguration) slog.Level {
	return slog.Level(-int(c.Verbosity))
}
