// Package logstyle holds a test that keeps the structured log messages of both
// binaries (adapter and emulator) and their packages in one style: Kubernetes'
// structured logging convention (k8s.io/community
// contributors/devel/sig-instrumentation/migration-to-structured-logging.md):
// a constant message that starts with a capital letter and ends without a
// period. golangci-lint's loggercheck and forbidigo (see .golangci.yml) check
// the key/value pairs and forbid printf-style klog calls.
package logstyle
