package provider

import (
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
