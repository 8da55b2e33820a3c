package pluginbin

import "github.com/gorun/gorun/internal/filetrust"

// CheckBinary returns an error wrapping [filetrust.ErrUnsafe] (a
// *filetrust.UnsafeError) when a user other than this one or root could
// have written the plugin binary at path or could replace it before it
// runs: [filetrust.Check] with [filetrust.Plugin].
func CheckBinary(path string) error { return filetrust.Check(path, filetrust.Plugin) }
