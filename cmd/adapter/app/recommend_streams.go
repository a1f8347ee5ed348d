package app

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// maxExposition bounds what `adapter recommend` reads of one pod's
// metrics: a real vLLM exposition is tens of kilobytes.
const maxExposition = 16 << 20

// exposition reads a pod's metrics from scrapeURL (what its scrape
// annotations say, as the adapter would scrape it).
type exposition func(ctx context.Context, p *corev1.Pod, scrapeURL string) ([]byte, error)

// proxyExposition reads through the API server's pod proxy, as
// `kubectl get --raw /api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH`
// does: recommend runs wherever its kubeconfig works, not inside the pod
// network. It needs get on pods/proxy.
func proxyExposition(client kubernetes.Interface) exposition {
	return func(ctx context.Context, p *corev1.Pod, scrapeURL string) ([]byte, error) {
		u, err := url.Parse(scrapeURL)
		if err != nil {
			return nil, err
		}
		body, err := client.CoreV1().Pods(p.Namespace).ProxyGet(u.Scheme, p.Name, u.Port(), u.Path, nil).Stream(ctx)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		b, err := io.ReadAll(io.LimitReader(body, maxExposition+1))
		if err == nil && len(b) > maxExposition {
			err = fmt.Errorf("exposition over %d bytes", maxExposition)
		}
		return b, err
	}
}

// streamsOf merges the request-duration histograms of the pods that ask
// to be scraped (gpuscale.io/scrape, or prometheus.io/scrape). It returns
// nil when none serves one, and what went wrong with the pods it could
// not read, which recommend prints rather than fail on.
func streamsOf(ctx context.Context, read exposition, pods []corev1.Pod) (*histogram.Histogram, []string) {
	ptrs := make([]*corev1.Pod, 0, len(pods))
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && pods[i].Status.PodIP != "" {
			ptrs = append(ptrs, &pods[i])
			byName[pods[i].Name] = &pods[i]
		}
	}
	targets, problems := discovery.Targets(ptrs, discovery.Config{PrometheusAnnotations: true})
	var notes []string
	for _, err := range problems {
		notes = append(notes, err.Error())
	}
	var hs []*histogram.Histogram
	for _, t := range targets {
		if t.Kind != discovery.KindInference {
			continue
		}
		b, err := read(ctx, byName[t.Pod], t.URL)
		if err == nil {
			var h *histogram.Histogram
			if h, err = recommend.Streams(b); h != nil {
				hs = append(hs, h)
			}
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("pod %s: %v", t.Key(), err))
		}
	}
	if len(hs) == 0 {
		return nil, notes
	}
	h, err := histogram.Merge(hs...)
	if err != nil {
		return nil, append(notes, "merging: "+err.Error())
	}
	return h, notes
}

// servingContainer names the template's container whose port the scrape
// annotations name (the inference server), else its first container.
func servingContainer(tmpl *corev1.PodTemplateSpec) string {
	if len(tmpl.Spec.Containers) == 0 {
		return ""
	}
	port := tmpl.Annotations[discovery.AnnotationPort]
	if port == "" {
		port = tmpl.Annotations[discovery.PrometheusPort]
	}
	for _, c := range tmpl.Spec.Containers {
		for _, p := range c.Ports {
			if strconv.Itoa(int(p.ContainerPort)) == port {
				return c.Name
			}
		}
	}
	return tmpl.Spec.Containers[0].Name
}

// shutdownTimeoutOf returns the --shutdown-timeout (in seconds, as vLLM
// takes it) that the template's container of that name passes in its
// command or args, either as one word or two, or inside a shell command
// line; 0 when it passes none or a value that is not a positive number of
// seconds.
func shutdownTimeoutOf(tmpl *corev1.PodTemplateSpec, container string) time.Duration {
	for _, c := range tmpl.Spec.Containers {
		if c.Name != container {
			continue
		}
		var words []string
		for _, arg := range slices.Concat(c.Command, c.Args) {
			words = append(words, strings.Fields(arg)...)
		}
		var timeout time.Duration
		for i, word := range words {
			flag, value, inline := strings.Cut(word, "=")
			if flag != "--shutdown-timeout" && flag != "--shutdown_timeout" {
				continue
			}
			if !inline {
				if i+1 >= len(words) {
					continue
				}
				value = words[i+1]
			}
			// The last one given wins, as argparse has it.
			if n, err := strconv.Atoi(value); err == nil && n > 0 {
				timeout = time.Duration(n) * time.Second
			} else {
				timeout = 0
			}
		}
		return timeout
	}
	return 0
}
