package main

import (
	"strings"
	"testing"
)

const testChangelog = `# Changelog

## [Unreleased]

### Added

- next thing

## [1.2.3] - 2026-01-02

### Fixed

- a bug

## [1.2.2] - 2025-12-01

- older

[1.2.3]: https://example.com/compare/v1.2.2...v1.2.3
`

func TestReleaseNotes(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		require       bool
		want, err     string
	}{
		{"section", "v1.2.3", true, "### Fixed\n\n- a bug\n", ""},
		{"older, up to the link references", "v1.2.2", true, "- older\n", ""},
		{"missing, strict", "v1.3.0", true, "", `no section for v1.3.0: add "## [1.3.0] - YYYY-MM-DD"`},
		{"missing, unreleased", "v1.3.0", false, "_CHANGELOG.md has no section for v1.3.0 yet: these are its Unreleased entries._\n\n### Added\n\n- next thing\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReleaseNotes([]byte(testChangelog), tc.version, tc.require)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRunRefusesBadInput: bad versions and missing flags are reported, all at once.
func TestRunRefusesBadInput(t *testing.T) {
	err := run(t.Context(), []string{"images", "-version", "1.2", "-created", "yesterday", "-bin-dir", "x", "-image-repo", "r"})
	for _, want := range []string{`-version="1.2": want vMAJOR.MINOR.PATCH`, "-revision: required", `-created="yesterday"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want %q", err, want)
		}
	}
	if err := run(t.Context(), []string{"notes", "-version", "v1"}); err == nil || !strings.Contains(err.Error(), `"v1": want vMAJOR`) {
		t.Errorf("notes -version v1: %v", err)
	}
	if err := run(t.Context(), []string{"push", "dir"}); err == nil || !strings.Contains(err.Error(), "want <OCI layout dir>=") {
		t.Errorf("push dir: %v", err)
	}
}

func TestInstallNotes(t *testing.T) {
	got := InstallNotes("v1.2.3", "registry.example.com/charts", "https://example.com/src", []ImageRecord{{
		Repository: "registry.example.com/sa", Digest: "sha256:ab",
		Platforms: []PlatformRecord{{Platform: "linux/amd64"}, {Platform: "linux/arm64/v8"}},
	}})
	for _, want := range []string{
		"helm install saturation-adapter oci://registry.example.com/charts/saturation-adapter --version 1.2.3 ",
		"kubectl apply -f https://example.com/src/releases/download/v1.2.3/saturation-adapter-v1.2.3.yaml\n",
		"- `registry.example.com/sa@sha256:ab` (linux/amd64, linux/arm64/v8)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("install notes lack %q:\n%s", want, got)
		}
	}
}
