// Package container_test builds the container image of deploy/container with
// Debian's buildah (vfs storage, no daemon, no base image to pull: the
// Dockerfile starts from scratch) from the context `make image-context`
// makes, and runs leasewatch inside it.
package container_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// buildah runs buildah on a storage of the test's own, and returns what it
// printed.
func buildah(t *testing.T, root string, args ...string) string {
	t.Helper()
	all := append([]string{"--root", filepath.Join(root, "storage"), "--runroot", filepath.Join(root, "run"), "--storage-driver", "vfs"}, args...)
	out, err := exec.Command("buildah", all...).CombinedOutput()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestImageBuildsFromScratchAndRunsAsNonRoot(t *testing.T) {
	if _, err := exec.LookPath("buildah"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("buildah is missing: install Debian's buildah package (make deps)")
		}
		t.Skip("buildah is missing: install Debian's buildah package")
	}
	dir := t.TempDir()
	context := filepath.Join(dir, "context")
	prepare := exec.Command("make", "-C", "../..", "image-context", "IMAGE_CONTEXT="+context, "VERSION=v0.0.0-test", "REVISION=abc123")
	if out, err := prepare.CombinedOutput(); err != nil {
		t.Fatalf("make image-context: %v\n%s", err, out)
	}
	root := filepath.Join(dir, "buildah")
	t.Cleanup(func() {
		// vfs layers hold files of the image's user: buildah removes them.
		exec.Command("buildah", "--root", filepath.Join(root, "storage"), "--runroot", filepath.Join(root, "run"), "--storage-driver", "vfs", "rm", "--all").Run()
		exec.Command("buildah", "--root", filepath.Join(root, "storage"), "--runroot", filepath.Join(root, "run"), "--storage-driver", "vfs", "rmi", "--all", "--force").Run()
	})
	buildah(t, root, "build", "--isolation", "chroot", "--build-arg", "VERSION=v0.0.0-test", "--build-arg", "REVISION=abc123",
		"-f", "Dockerfile", "-t", "leasewatch:test", context)

	var inspect struct {
		OCIv1 struct {
			Config struct {
				User       string
				Entrypoint []string
				Cmd        []string
				Volumes    map[string]struct{}
				Labels     map[string]string
			} `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(buildah(t, root, "inspect", "--type", "image", "leasewatch:test")), &inspect); err != nil {
		t.Fatal(err)
	}
	c := inspect.OCIv1.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if _, ok := c.Volumes["/var/lib/leasewatch"]; !ok {
		t.Errorf("volumes %v, want /var/lib/leasewatch", c.Volumes)
	}
	if c.Labels["org.opencontainers.image.version"] != "v0.0.0-test" || c.Labels["org.opencontainers.image.revision"] != "abc123" ||
		c.Labels["org.opencontainers.image.source"] == "" || c.Labels["org.opencontainers.image.title"] != "leasewatch" {
		t.Errorf("labels %v, want the OCI title, source, version and revision", c.Labels)
	}
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/leasewatch" || strings.Join(c.Cmd, " ") != "serve --config /etc/leasewatch/leasewatch.yaml" {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}

	ctr := buildah(t, root, "from", "leasewatch:test")
	// The state directory belongs to the image's user; nothing else is there
	// but the binary and the CA bundle (a run adds /etc/hosts and the like
	// to the container, so this is looked at first).
	mount := buildah(t, root, "mount", ctr)
	st, err := os.Stat(filepath.Join(mount, "var/lib/leasewatch"))
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid := ownerOf(st); uid != 65532 || gid != 65532 {
		t.Errorf("/var/lib/leasewatch owned by %d:%d, want 65532:65532", uid, gid)
	}
	var files []string
	filepath.WalkDir(mount, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(mount, path)
			files = append(files, rel)
		}
		return nil
	})
	if strings.Join(files, " ") != "etc/ssl/certs/ca-certificates.crt usr/local/bin/leasewatch" {
		t.Errorf("the image holds %q, want the CA bundle and the binary alone", files)
	}

	if out := buildah(t, root, "run", "--isolation", "chroot", ctr, "--", "/usr/local/bin/leasewatch", "version"); out != "leasewatch v0.0.0-test" {
		t.Errorf("leasewatch version in the image printed %q, want leasewatch v0.0.0-test", out)
	}
}

// ownerOf returns the file's user and group ids.
func ownerOf(fi os.FileInfo) (uid, gid uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
