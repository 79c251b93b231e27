module github.com/saturation-adapter/saturation-adapter

go 1.26.0
