module github.com/gorun/gorun

go 1.24
