package provider

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Request results as recorded by an Observer.
const (
	ResultOK       = "ok"
	ResultNotFound = "not_found"
	ResultError    = "error"
)

func result(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case apierrors.IsNotFound(err):
		return ResultNotFound
	default:
		return ResultError
	}
}

type nopObserver struct{}

func (nopObserver) Observe(string, string, string, string) {}

// apiError turns a source's failure (Prometheus unreachable, say) into an
// InternalError whose message names the cause: the API server would
// otherwise answer an opaque 500 and log that the error was not a Status.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok || errors.As(err, new(apierrors.APIStatus)) {
		return err
	}
	return apierrors.NewInternalError(err)
}
