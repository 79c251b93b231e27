package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"
)

// SBOM returns the CycloneDX SBOM (JSON) of one platform image: its binary's Go
// modules and the Go standard library, read from the binary's build info by
// cyclonedx-gomod's binary mode (the tool CycloneDX maintains for Go), with the image it
// describes in the metadata. cyclonedx-gomod's CLI would stamp the wall clock and a
// random serial number; here the time is the commit's and the serial number is derived
// from the image digest, so the SBOM is as reproducible as the image.
func SBOM(binary, imageRef string, digest string, p Provenance) ([]byte, error) {
	gen, err := bin.NewGenerator(binary,
		bin.WithIncludeStdlib(true),
		bin.WithVersionOverride(p.Version),
		bin.WithLogger(zerolog.Nop()))
	if err != nil {
		return nil, err
	}
	bom, err := gen.Generate()
	if err != nil {
		return nil, fmt.Errorf("SBOM of %s: %w", binary, err)
	}
	bom.SerialNumber = serialNumber(imageRef + "@" + digest)
	bom.Metadata.Timestamp = p.Created.UTC().Format(time.RFC3339)
	props := []cdx.Property{
		{Name: "saturation-adapter:image", Value: imageRef},
		{Name: "saturation-adapter:image:digest", Value: digest},
		{Name: "saturation-adapter:revision", Value: p.Revision},
	}
	if bom.Metadata.Properties != nil {
		props = append(props, *bom.Metadata.Properties...)
	}
	bom.Metadata.Properties = &props
	bom.Metadata.Tools = &cdx.ToolsChoice{Components: &[]cdx.Component{{
		Type: cdx.ComponentTypeApplication, Name: "cyclonedx-gomod", Group: "github.com/CycloneDX",
		Description: "binary mode, as a library of saturation-adapter's hack/release",
	}}}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// serialNumber returns an RFC 4122 URN for s: a name-based UUID (version 5 layout, its
// 16 bytes from SHA-256 rather than SHA-1).
func serialNumber(s string) string {
	h := sha256.Sum256([]byte(s))
	u := h[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
