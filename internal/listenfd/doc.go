// Package listenfd hands bound listening sockets from a process to the
// children it starts, so that a port the parent picked cannot be taken
// by another program between the parent releasing it and the child
// binding it. `warden up` binds a free port for every address it picks,
// passes each socket to the process it is for (Pass), and that process's
// Listen on the same address takes the inherited socket instead of
// binding anew.
//
// The sockets travel as extra file descriptors (exec.Cmd.ExtraFiles) and
// the environment variable Env says which descriptor serves which
// address. An address the variable does not name, or a descriptor that
// is not a listener on exactly that address, is bound as usual.
package listenfd
