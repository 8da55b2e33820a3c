// Package config merges gorun's settings from several sources and remembers
// where each value came from.
//
// Sources, from lowest to highest precedence:
//
//  1. the defaults in the [Schema];
//  2. TOML files, by default /etc/gorun/config.toml, then
//     $XDG_CONFIG_HOME/gorun/config.toml (or ~/.config/gorun/config.toml),
//     then ./gorun.toml (see [DefaultFiles]); later files win;
//  3. GORUN_* environment variables, one per key (see [EnvName]);
//  4. command-line flags given by the user.
//
// A configuration file is flat: its top-level keys are the long flag names,
// for example
//
//	np = 4
//	tag-output = true
//	grace-period = "5s"
//	x = ["FOO", "BAR=1"]
//
// [Load] validates every value against the key's [Kind] and stores it in a
// canonical text form, so that the caller can apply it back onto its flags;
// [Config.Format] prints the merged result as TOML with each value's
// [Source] as a trailing comment.
//
// The package depends only on the standard library and
// github.com/BurntSushi/toml; it knows nothing of the CLI library.
package config
