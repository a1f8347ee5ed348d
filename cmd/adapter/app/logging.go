package app

import (
	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// LoggingFlags registers component-base's logging flags on fs, as every
// Kubernetes component has them: --logging-format=text|json, -v and
// --vmodule. ApplyLogging applies what they say once parsed.
func LoggingFlags(fs *pflag.FlagSet) *logsapi.LoggingConfiguration {
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(c, fs)
	return c
}

// ApplyLogging checks the logging flags and sets klog up by them.
func ApplyLogging(c *logsapi.LoggingConfiguration) error {
	gates := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gates); err != nil {
		return err
	}
	return logsapi.ValidateAndApply(c, gates)
}
