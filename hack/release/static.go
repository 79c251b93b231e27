package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
)

// elfMachines maps GOARCH to the ELF machine its binaries are built for.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkStatic returns an error unless bin is a Linux ELF binary for pl's architecture,
// without a dynamic loader (an empty base has no libc), built by Go with CGO_ENABLED=0.
func checkStatic(bin []byte, pl Platform) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	want, ok := elfMachines[pl.Architecture]
	if !ok {
		return fmt.Errorf("architecture %q: want one of amd64, arm64", pl.Architecture)
	}
	if f.Machine != want {
		return fmt.Errorf("built for %s, want %s (%s)", f.Machine, want, pl.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (has an ELF interpreter): build with CGO_ENABLED=0")
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("no Go build info: %w", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("built with CGO_ENABLED=%q, want 0", settings["CGO_ENABLED"])
	}
	if settings["GOOS"] != pl.OS || settings["GOARCH"] != pl.Architecture {
		return fmt.Errorf("built for %s/%s, want %s/%s", settings["GOOS"], settings["GOARCH"], pl.OS, pl.Architecture)
	}
	return nil
}
