// Command release builds saturation-adapter's release artifacts without a container
// engine and publishes them (see the Makefile's release target and
// .github/workflows/release.yaml):
//
//	release images  the adapter and drain images, an OCI image index each (linux/amd64,
//	                linux/arm64), written as OCI layouts, with a CycloneDX SBOM per
//	                platform image
//	release digest  the digest of an OCI layout's one index or manifest
//	release chart   the Helm chart packaged reproducibly (.tgz) and as an OCI artifact
//	release notes   a version's section of CHANGELOG.md
//	release push    the OCI layouts to a registry, each by its version tag
//
// Every output is a function of its inputs and the commit's time: two runs on one commit
// write the same bytes, so the digests pinned in the release YAML and the chart are the
// digests the workflow pushes and signs.
package main
