// Package promqlcompat checks pkg/signal/histogram against Prometheus's own query
// engine. It is a module of its own so that Prometheus, and the cloud SDKs
// and OpenTelemetry upgrades it drags in, stay out of the module that ships
// the adapter.
package promqlcompat
