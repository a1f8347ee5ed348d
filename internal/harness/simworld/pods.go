package simworld

import (
	"hash/fnv"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// nodeIndex indexes the pod informer by spec.nodeName, as the kubelet sees
// its own pods.
const nodeIndex = "spec.nodeName"

func byNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

func keyOf(p *corev1.Pod) podKey {
	return podKey{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// terminal reports whether p's containers have all stopped for good, after
// which the kubelet no longer reports it and its devices are free.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// serving reports whether p's containers would be running and reachable:
// bound, given an IP, not terminal and not being deleted (a terminating
// pod's server is draining; the simulation stops it at once).
func serving(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.PodIP != "" && !terminal(p) && p.DeletionTimestamp == nil
}

// Ready reports whether a Service would send p traffic: it is Ready and not
// being deleted.
func Ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// simContainer returns p's first container whose image starts with image.
func simContainer(p *corev1.Pod, image string) *corev1.Container {
	for i := range p.Spec.Containers {
		if strings.HasPrefix(p.Spec.Containers[i].Image, image) {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

// listenAddr is where c serves on p's IP: its first declared port, else
// def.
func listenAddr(p *corev1.Pod, c *corev1.Container, def int) string {
	port := def
	if len(c.Ports) > 0 && c.Ports[0].ContainerPort > 0 {
		port = int(c.Ports[0].ContainerPort)
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))
}

// env returns the literal value of c's variable name; values from
// references are not resolved.
func env(c *corev1.Container, name, def string) string {
	for _, e := range c.Env {
		if e.Name == name && e.Value != "" {
			return e.Value
		}
	}
	return def
}

// seedOf derives a server's load seed from its pod's name, so that a
// replayed test generates the same requests.
func seedOf(k podKey) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k.String()))
	return h.Sum64()
}

// gpuRequests lists what the GPU-requesting pods among pods ask of their
// node's device plugin. Terminal pods hold nothing.
func gpuRequests(pods []*corev1.Pod) []gpuRequest {
	var out []gpuRequest
	for _, p := range pods {
		if terminal(p) {
			continue
		}
		r := gpuRequest{Pod: keyOf(p), Created: p.CreationTimestamp.Time}
		total := 0
		for _, c := range p.Spec.Containers {
			if n := containerGPUs(&c); n > 0 {
				r.Containers = append(r.Containers, containerRequest{Name: c.Name, GPUs: n})
				total += n
			}
		}
		if total > 0 {
			out = append(out, r)
		}
	}
	return out
}

// containerGPUs is c's GPU count. Extended resources must have equal
// requests and limits, and the API server copies a lone limit into the
// request, so either will do.
func containerGPUs(c *corev1.Container) int {
	q, ok := c.Resources.Limits[GPUResource]
	if !ok {
		q, ok = c.Resources.Requests[GPUResource]
	}
	if !ok {
		return 0
	}
	return int(q.Value())
}

// nodeGPUs is the number of GPUs node n advertises, 8 when it advertises
// none (or is unknown), as the simulated exporter's default.
func nodeGPUs(n *corev1.Node) int {
	if n != nil {
		if q, ok := n.Status.Allocatable[GPUResource]; ok && q.Value() > 0 {
			return int(q.Value())
		}
	}
	return 8
}
