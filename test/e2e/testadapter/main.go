// Command testadapter is custom-metrics-apiserver's own test adapter (its
// fake provider, sigs.k8s.io/custom-metrics-apiserver/test-adapter/provider,
// on the library's adapter base, as upstream's test-adapter command runs
// it) with one difference: the endpoint that sets the fake values listens
// on --write-address, where upstream's command fixes it at :8080, so that
// the end-to-end suite runs it on a free loopback port and two
// environments on one machine do not collide.
package main

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/emicklei/go-restful/v3"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver/metrics"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	fakeprovider "sigs.k8s.io/custom-metrics-apiserver/test-adapter/provider"
)

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()

	cmd := &basecmd.AdapterBase{Name: "test-adapter"}
	writeAddress := cmd.Flags().String("write-address", "127.0.0.1:8080", "address of the HTTP endpoint that sets fake metric values (POST /write-metrics/...)")
	logs.AddFlags(cmd.Flags())
	if err := cmd.Flags().Parse(os.Args[1:]); err != nil {
		klog.Fatalf("flags: %v", err)
	}
	client, err := cmd.DynamicClient()
	if err != nil {
		klog.Fatalf("dynamic client: %v", err)
	}
	mapper, err := cmd.RESTMapper()
	if err != nil {
		klog.Fatalf("REST mapper: %v", err)
	}
	provider, writes := fakeprovider.NewFakeProvider(client, mapper)
	cmd.WithCustomMetrics(provider)
	cmd.WithExternalMetrics(provider)
	if err := metrics.RegisterMetrics(legacyregistry.Register); err != nil {
		klog.Fatalf("metrics: %v", err)
	}

	container := restful.NewContainer()
	container.Add(writes)
	write := &http.Server{Addr: *writeAddress, Handler: container, ReadHeaderTimeout: 3 * time.Second}
	go func() { klog.Fatal(write.ListenAndServe()) }()
	if err := cmd.Run(context.Background()); err != nil {
		klog.Fatalf("adapter: %v", err)
	}
}
