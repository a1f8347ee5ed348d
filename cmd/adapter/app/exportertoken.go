package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuscale/gpuscale/pkg/adapter/tokensecret"
	"github.com/gpuscale/gpuscale/pkg/tokenfile"
)

// The exporters' reserved lane (their --web.reserved-token-file): the
// adapter makes the token's Secret (--exporter-token-secret) and reads the
// token from a file (--exporter-token-file), the Secret mounted as an
// optional volume, as the exporters do. Neither needs the other to start:
// the lane opens once the kubelet has projected the Secret on both sides.

// minExporterToken is the shortest token the exporters accept.
const minExporterToken = 16

// ownedLabels mark the Secrets the adapter makes at runtime.
func ownedLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": "gpuscale-adapter", "app.kubernetes.io/part-of": "gpuscale"}
}

func (o *Options) validateExporterToken() []error {
	if o.ExporterTokenSecret == "" {
		return nil
	}
	var errs []error
	if o.ExporterTokenFile == "" {
		errs = append(errs, errors.New("--exporter-token-secret needs --exporter-token-file: the adapter reads the token from the Secret mounted there"))
	}
	if _, _, err := o.exporterTokenSecret(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (o *Options) exporterTokenSecret() (namespace, name string, err error) {
	return secretRef("--exporter-token-secret", o.ExporterTokenSecret)
}

// exporterTokenFile follows --exporter-token-file (nil without one); the
// caller runs it.
func (o *Options) exporterTokenFile(log *slog.Logger) (*tokenfile.File, error) {
	if o.ExporterTokenFile == "" {
		return nil, nil
	}
	f, err := tokenfile.New(tokenfile.Config{Path: o.ExporterTokenFile, MinLength: minExporterToken,
		Metric: "gpuscale_adapter_exporter_token", What: "exporters' reserved-lane token (--exporter-token-file)",
		Logger: log.With("component", "exporter-token")})
	if err != nil {
		return nil, fmt.Errorf("--exporter-token-file: %w", err)
	}
	o.metricsRegisterer().MustRegister(f.Collectors()...)
	return f, nil
}

// startExporterTokenSecret keeps --exporter-token-secret in the
// background: created with a random token when it does not exist, never
// written when it does. A failure (RBAC, the API) is logged, counted and
// retried; the adapter runs on, without a lane until the Secret exists.
func (a *Adapter) startExporterTokenSecret(ctx context.Context, log *slog.Logger) error {
	if a.Options.ExporterTokenSecret == "" {
		return nil
	}
	ns, name, err := a.Options.exporterTokenSecret()
	if err != nil {
		return err
	}
	cfg, err := a.ClientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k, err := tokensecret.New(tokensecret.Config{Client: client, Namespace: ns, Name: name, MinLength: minExporterToken,
		Labels: ownedLabels(), Metric: "gpuscale_adapter_exporter_token_secret", Logger: log.With("component", "exporter-token-secret")})
	if err != nil {
		return err
	}
	a.Options.metricsRegisterer().MustRegister(k.Collectors()...)
	go k.Run(ctx)
	return nil
}
