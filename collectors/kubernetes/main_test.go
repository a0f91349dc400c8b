package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// apiserver is the package's one real kube-apiserver, shared by every test;
// each test works in namespaces of its own.
var (
	apiserver    *kubetest.Apiserver
	apiserverErr error
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasewatch-kubernetes-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "kube-apiserver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()

	// A cold build of the apiserver takes minutes; a cached one starts in
	// seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	apiserver, apiserverErr = kubetest.Start(ctx, filepath.Join(dir, "cluster"), logFile)
	cancel()
	if apiserverErr != nil {
		fmt.Fprintf(os.Stderr, "kube-apiserver: %v\n%s", apiserverErr, testproc.TailFile(logPath, 40))
		if os.Getenv("CI") == "true" {
			// In CI a missing apiserver is a failure, never a skip.
			return 1
		}
	} else {
		defer apiserver.Stop()
	}
	return m.Run()
}

// needAPIServer skips a test when the apiserver could not start (outside CI;
// in CI TestMain fails first).
func needAPIServer(t *testing.T) {
	t.Helper()
	if apiserver == nil {
		t.Skipf("no kube-apiserver: %v", apiserverErr)
	}
}
