// Package dashboards holds no code: its tests check that every metric name
// gpuscale's Grafana dashboards (dashboards/), alert rules
// (deploy/helm/gpuscale/rules) and example HPAs (deploy/examples) use is one
// the project exports, serves or documents as standard, so that renaming a
// metric breaks the build rather than a dashboard; and that the Helm
// chart's README documents every value.
//
// It is a module of its own because the PromQL parser and rule-file loader
// come with github.com/prometheus/prometheus, whose dependencies gpuscale
// itself does without.
package dashboards
