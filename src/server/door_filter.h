/*
** door_filter.h -- a door (a UCX listener a knock opened: server.c) shut to every address but
** the knocker's, by the kernel, before UCX reads a byte: a socket filter (classic BPF) on the
** listening socket drops every packet from another source, so another host never completes a
** connection to it. UCX 1.13's connection manager aborts the process on malformed first bytes
** (17 zero bytes); its listener cannot be asked to filter, and its socket is not given out, so
** the filter goes on the socket found among this process's descriptors by the door's port.
** What it cannot shut out: a process on the knocker's own host, in the moments the door is
** open (docs/remote.md says so).
*/
#ifndef XFER_DOOR_FILTER_H
#define XFER_DOOR_FILTER_H

#include <stdint.h>
#include <sys/socket.h>

/* Filters the listening TCP socket of `family` bound to `port` so that only packets from
** `client`'s address reach it. 0, or an errno (ENOENT: no such socket). */
int xfer_door_admit_only(int family, uint16_t port, const struct sockaddr *client);

#endif
