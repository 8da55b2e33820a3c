package collbench

import (
	"io"
	"os"
)

// Save writes a report with write to the file path, to stdout when path
// is "-", or nowhere when path is "".
func Save(path string, stdout io.Writer, write func(io.Writer) error) error {
	switch path {
	case "":
		return nil
	case "-":
		return write(stdout)
	}
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
