package main

import (
	"fmt"
	"regexp"
	"strings"
)

// changelogHeading matches a version heading of CHANGELOG.md (Keep a Changelog):
// "## [1.2.3] - 2026-01-02", "## [v1.2.3]", "## v1.2.3", "## [Unreleased]".
var changelogHeading = regexp.MustCompile(`^## \[?v?([^\]\s]+)\]?`)

// ReleaseNotes returns the body of the section of changelog for version (vX.Y.Z),
// without its heading. Without such a section it returns the Unreleased section, headed
// by a line saying so, unless requireSection is set (the release workflow sets it: a
// published release says what it contains); then it is an error.
func ReleaseNotes(changelog []byte, version string, requireSection bool) (string, error) {
	want := strings.TrimPrefix(version, "v")
	sections := map[string]string{}
	var cur string
	var body []string
	flush := func() {
		if cur != "" {
			if _, dup := sections[cur]; !dup {
				sections[cur] = strings.TrimSpace(strings.Join(body, "\n")) + "\n"
			}
		}
	}
	for _, line := range strings.Split(string(changelog), "\n") {
		if strings.HasPrefix(line, "## ") {
			flush()
			cur, body = "", nil
			if m := changelogHeading.FindStringSubmatch(line); m != nil {
				cur = strings.ToLower(m[1])
			}
			continue
		}
		// Link references ("[1.2.3]: https://…") close the last section.
		if cur != "" && regexp.MustCompile(`^\[[^\]]+\]: `).MatchString(line) {
			flush()
			cur, body = "", nil
			continue
		}
		if cur != "" {
			body = append(body, line)
		}
	}
	flush()
	if s, ok := sections[want]; ok && strings.TrimSpace(s) != "" {
		return s, nil
	}
	if requireSection {
		return "", fmt.Errorf("CHANGELOG.md has no section for %s: add \"## [%s] - YYYY-MM-DD\" (the Unreleased entries it ships) before tagging", version, want)
	}
	s, ok := sections["unreleased"]
	if !ok {
		return "", fmt.Errorf("CHANGELOG.md has neither a section for %s nor an Unreleased one", version)
	}
	return fmt.Sprintf("_CHANGELOG.md has no section for %s yet: these are its Unreleased entries._\n\n%s", version, s), nil
}

// InstallNotes returns the release notes' install section: the one-line installs from
// the published chart and YAML, and the images by digest, for version (vX.Y.Z). The
// chart is at <chartRepo>/saturation-adapter; the YAML among the GitHub release's files
// of source.
func InstallNotes(version, chartRepo, source string, images []ImageRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Install\n\n```sh\n")
	fmt.Fprintf(&b, "helm install saturation-adapter oci://%s/saturation-adapter --version %s --namespace saturation-adapter --create-namespace\n",
		chartRepo, strings.TrimPrefix(version, "v"))
	fmt.Fprintf(&b, "# or\nkubectl apply -f %s/releases/download/%s/saturation-adapter-%s.yaml\n```\n\n", source, version, version)
	b.WriteString("Images (multi-platform indexes, signed keyless by the release workflow; `docs/install.md` says how to verify them):\n\n")
	for _, im := range images {
		var platforms []string
		for _, p := range im.Platforms {
			platforms = append(platforms, p.Platform)
		}
		fmt.Fprintf(&b, "- `%s@%s` (%s)\n", im.Repository, im.Digest, strings.Join(platforms, ", "))
	}
	return b.String()
}
