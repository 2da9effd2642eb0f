/*
** door_filter.h -- a door (a UCX listener a knock opened: server.c) shut to every address but
** the knocker's address and the port its knock named, by the kernel, before UCX reads a
** byte: a socket filter (classic BPF) on the listening socket drops every packet from another
** source, so no one else completes a connection to it -- another host, or another process of
** the knocker's host (the client holds the port it named until its UCX binds it: gate.h).
** UCX 1.13's connection manager aborts the process on malformed first bytes (17 zero bytes);
** its listener cannot be asked to filter, and its socket is not given out, so the filter goes
** on the socket found among this process's descriptors by the door's port.
*/
#ifndef XFER_DOOR_FILTER_H
#define XFER_DOOR_FILTER_H

#include <stdint.h>
#include <sys/socket.h>

/* Filters the listening TCP socket of `family` bound to `port` so that only packets from
** `client`'s address and port (0: any port) reach it. 0, or an errno (ENOENT: no such socket). */
int xfer_door_admit_only(int family, uint16_t port, const struct sockaddr *client);

#endif
