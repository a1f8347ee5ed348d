package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/hostile"
)

// hostilePod is a bench pod, annotated for scraping like any inference
// server, that serves the given kind of misbehaviour.
func hostilePod(ns, kind string, i int) *corev1.Pod {
	p := benchPod(ns, i)
	p.Name = fmt.Sprintf("%s-%03d", kind, i)
	p.Labels["hostile"] = kind
	return p
}

// createHostile creates perKind pods of every kind in ns, waits for them
// to be Ready, and serves each kind's misbehaviour on its pod IPs.
func (b *bench) createHostile(ctx context.Context, ns string, kinds []hostile.Kind, perKind int) error {
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, k := range kinds {
		for i := range perKind {
			if _, err := b.client.CoreV1().Pods(ns).Create(ctx, hostilePod(ns, k.Name, i), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	pods, err := b.waitReady(ctx, ns, perKind*len(kinds))
	if err != nil {
		return err
	}
	byKind := make(map[string]hostile.Kind, len(kinds))
	for _, k := range kinds {
		byKind[k.Name] = k
	}
	for _, p := range pods {
		l, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(metricsPort)))
		if err != nil {
			return fmt.Errorf("listen for pod %s: %w", p.Name, err)
		}
		b.listeners = append(b.listeners, l)
		go hostile.Serve(l, byKind[p.Labels["hostile"]])
	}
	return nil
}
