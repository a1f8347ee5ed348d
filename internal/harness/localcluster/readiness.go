package localcluster

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// probeTimeout bounds one readiness request, so that a hung component is
// retried rather than stalling the wait past its deadline.
const probeTimeout = 2 * time.Second

// httpCheck returns a check that GETs url and succeeds on 200. With asAdmin
// the request carries the admin client certificate and verifies the API
// server against the cluster CA; otherwise it is anonymous and skips
// verification, because the controller manager and scheduler serve
// self-signed certificates they generate at startup (on loopback).
func (c *Cluster) httpCheck(url string, asAdmin bool) func(context.Context) bool {
	rt := c.adminTransport
	if !asAdmin {
		rt = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback health probe of a self-signed component
	}
	return testenv.HTTPOK(&http.Client{Transport: rt, Timeout: probeTimeout}, url)
}

// defaultServiceAccountExists reports whether the controller manager has
// created default/default; until then the ServiceAccount admission plugin
// rejects pods.
func (c *Cluster) defaultServiceAccountExists(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	return err == nil
}
