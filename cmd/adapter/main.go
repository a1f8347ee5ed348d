// Command adapter is gpuscale's metrics adapter: a Kubernetes custom and
// external metrics API server that serves GPU and LLM-inference signals to
// HorizontalPodAutoscalers.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/gpuscale/gpuscale/cmd/adapter/app"
	"github.com/gpuscale/gpuscale/pkg/buildinfo"
)

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()

	// `adapter recommend` is a client command with flags of its own.
	if len(os.Args) > 1 && os.Args[1] == "recommend" {
		if err := app.RunRecommend(server.SetupSignalContext(), os.Args[2:], os.Stdout); err != nil {
			klog.ErrorS(err, "recommend")
			os.Exit(1)
		}
		return
	}

	a := app.NewAdapter()
	// component-base's logging flags: --logging-format=text|json, -v,
	// --vmodule, as every Kubernetes component has them.
	logOpts := app.LoggingFlags(a.Flags())
	a.Flags().AddGoFlagSet(flag.CommandLine)
	showVersion := a.Flags().Bool("version", false, "Print the version and exit.")
	if err := a.Flags().Parse(os.Args[1:]); err != nil {
		klog.ErrorS(err, "parsing flags")
		os.Exit(2)
	}
	if err := app.ApplyLogging(logOpts); err != nil {
		klog.ErrorS(err, "logging flags")
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(buildinfo.Print("adapter"))
		return
	}
	// Served on the adapter's /metrics with the apiserver's own series.
	legacyregistry.RawMustRegister(buildinfo.Collector())
	if err := a.Run(server.SetupSignalContext()); err != nil {
		klog.ErrorS(err, "adapter stopped")
		os.Exit(1)
	}
}
