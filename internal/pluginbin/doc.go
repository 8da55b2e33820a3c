// Package pluginbin finds the binaries of gorun's plugins and refuses the
// ones that a user other than this one or root could have changed
// ([CheckBinary]); it also gives the environment a plugin starts with,
// without the job's secrets ([Environ]). It starts nothing: package plugins
// starts transport plugins with go-plugin, and package pmixbridge the PMIx
// plugin, each with these checks first. It imports neither, so that the
// launcher can find and check gorun-pmix without linking go-plugin.
package pluginbin
