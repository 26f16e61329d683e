// Wrapper module: pins github.com/prometheus-operator/prometheus-operator (go.sum holds its hash) so that
// tools/engine/build.sh can take the Prometheus Operator CRDs from the module's files (example/prometheus-operator-crd)
// through the Go module proxy; nothing here is compiled.
module kimi-k3.local/engine/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
