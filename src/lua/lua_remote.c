/*
** lua_remote.c -- remote devices from Lua: xfer.connect(url, {timeout, token}) -> an
** xfer.Peer (name, devices, lost; close()), xfer.listen(url, {name, token}) -> an
** xfer.Listener (url, progress(seconds), stats(), close()). Both are closed by their __gc, which
** never raises.
*/
#include <string.h>

#include "binding.h"
#include "xfer_remote.h"

#define XL_PEER "xfer.Peer"
#define XL_LISTENER "xfer.Listener"

typedef struct peer_box {
  xfer_peer *peer;
} peer_box;

typedef struct listener_box {
  xfer_listener *listener;
} listener_box;

static const char *check_url(lua_State *L, const char *fname)
{
  if (lua_type(L, 1) != LUA_TSTRING) xl_arg_error(L, 1, fname, "address string (ucx://host:port)");
  size_t len;
  const char *url = lua_tolstring(L, 1, &len);
  if (strlen(url) != len) xl_raise_code(L, XFER_E_INVALID, fname, "%s: an address with a NUL byte", fname);
  return url;
}

/* {segments, bytes, made, refused}: host memory registered with UCX (ucp_mem_map) */
static void push_registered(lua_State *L, const xfer_registered *r)
{
  lua_createtable(L, 0, 4);
  lua_pushnumber(L, (lua_Number)r->made);
  lua_setfield(L, -2, "made");
  lua_pushnumber(L, (lua_Number)r->segments);
  lua_setfield(L, -2, "segments");
  lua_pushnumber(L, (lua_Number)r->bytes);
  lua_setfield(L, -2, "bytes");
  lua_pushnumber(L, (lua_Number)r->refused);
  lua_setfield(L, -2, "refused");
}

/* -- Peers ------------------------------------------------------------------------------------ */

static int l_connect(lua_State *L)
{
  static const char *const keys[] = {"timeout", "token", NULL};
  const char *url = check_url(L, "connect");
  xfer_connect_opts opts = {0, NULL};
  if (!lua_isnoneornil(L, 2)) {
    xl_check_options(L, 2, "connect", keys);
    lua_getfield(L, 2, "timeout");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0) || lua_tonumber(L, -1) > 86400)
        xl_raise_code(L, XFER_E_INVALID, "connect", "connect: 'timeout' must be a number of seconds "
                      "above 0 (at most 86400)");
      opts.timeout = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    opts.token = xl_opt_string(L, 2, "connect", "token", NULL);
  }
  peer_box *b = lua_newuserdata(L, sizeof *b);
  b->peer = NULL;
  luaL_getmetatable(L, XL_PEER);
  lua_setmetatable(L, -2);
  xfer_error err;
  if (xfer_connect(xl_ctx(L), url, &opts, &b->peer, &err)) xl_raise(L, &err);
  return 1;
}

/* -- A peer's fields: a getter each, found by name in one table lookup ------------------------- */

static void p_name(lua_State *L, xfer_peer *p) { lua_pushstring(L, xfer_peer_name(p)); }
static void p_timeout(lua_State *L, xfer_peer *p) { lua_pushnumber(L, xfer_peer_timeout(p)); }
static void p_lost(lua_State *L, xfer_peer *p) { lua_pushboolean(L, xfer_peer_is_lost(p)); }
static void p_canceled(lua_State *L, xfer_peer *p) { lua_pushnumber(L, (lua_Number)xfer_peer_canceled(p)); }

static void p_registered(lua_State *L, xfer_peer *p)
{
  xfer_registered r;
  xfer_peer_registered(p, &r);
  push_registered(L, &r);
}

/* {here = {"host", "cuda"}, there = {"host"}} */
static void p_memory(lua_State *L, xfer_peer *p)
{
  char sides[2][32];
  xfer_peer_memory(p, sides[0], sides[1], sizeof sides[0]);
  lua_createtable(L, 0, 2);
  for (int side = 0; side < 2; side++) {
    lua_newtable(L);
    int i = 0;
    char *save = NULL;
    for (char *word = strtok_r(sides[side], " ", &save); word; word = strtok_r(NULL, " ", &save)) {
      lua_pushstring(L, word);
      lua_rawseti(L, -2, ++i);
    }
    lua_setfield(L, -2, side ? "there" : "here");
  }
}

static void p_transports(lua_State *L, xfer_peer *p)
{
  char lines[2048];
  xfer_peer_transports(p, lines, sizeof lines);
  lua_newtable(L);
  int i = 0;
  for (char *line = lines, *end; *line; line = end + 1) {
    end = strchr(line, '\n');
    if (!end) break;
    lua_pushlstring(L, line, (size_t)(end - line));
    lua_rawseti(L, -2, ++i);
  }
}

static void p_devices(lua_State *L, xfer_peer *p)
{
  size_t n = xfer_peer_device_count(p);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    xl_push_device(L, xfer_peer_device(p, i));
    lua_rawseti(L, -2, (int)i + 1);
  }
}

static const struct {
  const char *key;
  void (*get)(lua_State *L, xfer_peer *p);
} peer_fields[] = {
  {"name", p_name}, {"timeout", p_timeout}, {"lost", p_lost}, {"registered", p_registered},
  {"canceled", p_canceled},
  {"memory", p_memory}, {"transports", p_transports}, {"devices", p_devices},
};

/* __index: a method of the metatable (close, set_timeout), else a field by the upvalue's table
** (name -> getter number). A closed peer is lost, and has no other field. */
static int peer_index(lua_State *L)
{
  peer_box *b = luaL_checkudata(L, 1, XL_PEER);
  const char *key = luaL_checkstring(L, 2);
  if (!strcmp(key, "close") || !strcmp(key, "set_timeout")) {
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, key);
    return 1;
  }
  if (!b->peer) {
    if (!strcmp(key, "lost")) {
      lua_pushboolean(L, 1);
      return 1;
    }
    xl_raise_code(L, XFER_E_PEER_LOST, "peer", "the peer was closed");
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (!lua_isnumber(L, -1)) return 0;
  peer_fields[lua_tointeger(L, -1)].get(L, b->peer);
  return 1;
}

static int peer_close(lua_State *L)
{
  peer_box *b = luaL_checkudata(L, 1, XL_PEER);
  xfer_peer *p = b->peer;
  b->peer = NULL;
  xfer_peer_close(p); /* (NULL: closed already) */
  return 0;
}

/* peer:set_timeout(seconds): how long the server may stay silent, for the requests from now on */
static int peer_set_timeout(lua_State *L)
{
  peer_box *b = luaL_checkudata(L, 1, XL_PEER);
  if (!b->peer) xl_raise_code(L, XFER_E_PEER_LOST, "set_timeout", "the peer was closed");
  if (lua_type(L, 2) != LUA_TNUMBER) xl_arg_error(L, 2, "set_timeout", "number of seconds");
  xfer_error err;
  if (xfer_peer_set_timeout(b->peer, lua_tonumber(L, 2), &err)) xl_raise(L, &err);
  return 0;
}

static int peer_tostring(lua_State *L)
{
  peer_box *b = luaL_checkudata(L, 1, XL_PEER);
  if (!b->peer) lua_pushliteral(L, "xfer.Peer(closed)");
  else lua_pushfstring(L, "xfer.Peer(%s, %d devices%s)", xfer_peer_name(b->peer),
                       (int)xfer_peer_device_count(b->peer), xfer_peer_is_lost(b->peer) ? ", lost" : "");
  return 1;
}

/* -- Listeners -------------------------------------------------------------------------------- */

static xfer_listener *check_listener(lua_State *L, const char *fname)
{
  listener_box *b = xl_test_udata(L, 1, XL_LISTENER);
  if (!b) {
    xl_arg_error(L, 1, fname, "xfer.Listener");
    return NULL; /* (it raises) */
  }
  if (!b->listener) xl_raise_code(L, XFER_E_CLOSED, fname, "%s: the listener was closed", fname);
  return b->listener;
}

static int l_listen(lua_State *L)
{
  static const char *const keys[] = {"name", "token", "thread", "client_memory", NULL};
  const char *url = check_url(L, "listen");
  xfer_listen_opts opts = {NULL, NULL, 0, 0};
  if (!lua_isnoneornil(L, 2)) {
    xl_check_options(L, 2, "listen", keys);
    opts.name = xl_opt_string(L, 2, "listen", "name", NULL);
    opts.token = xl_opt_string(L, 2, "listen", "token", NULL);
    lua_getfield(L, 2, "thread");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      xl_raise_code(L, XFER_E_INVALID, "listen", "listen: option 'thread' must be a boolean, not a %s",
                    luaL_typename(L, -1));
    opts.thread = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "client_memory");
    if (!lua_isnil(L, -1)) {
      lua_Number n = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
      if (!(n >= 1 && n <= 9007199254740992.0) || n != (lua_Number)(uint64_t)n)
        xl_raise_code(L, XFER_E_INVALID, "listen", "listen: option 'client_memory' must be a whole number "
                      "of bytes, at least 1");
      opts.client_memory = (uint64_t)n;
    }
    lua_pop(L, 1);
  }
  listener_box *b = lua_newuserdata(L, sizeof *b);
  b->listener = NULL;
  luaL_getmetatable(L, XL_LISTENER);
  lua_setmetatable(L, -2);
  xfer_error err;
  if (xfer_listen(xl_ctx(L), url, &opts, &b->listener, &err)) xl_raise(L, &err);
  return 1;
}

/* listener:progress([seconds]): serves for that long (default 0: what has arrived) */
static int listener_progress(lua_State *L)
{
  xfer_listener *l = check_listener(L, "progress");
  double seconds = 0;
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TNUMBER || !(lua_tonumber(L, 2) >= 0))
      xl_raise_code(L, XFER_E_INVALID, "progress", "progress: seconds must be a number >= 0");
    seconds = lua_tonumber(L, 2);
  }
  xfer_error err;
  if (xfer_listener_progress(l, seconds, &err)) xl_raise(L, &err);
  return 0;
}

static int listener_stats(lua_State *L)
{
  xfer_listener *l = check_listener(L, "stats");
  uint64_t clients, served, dropped;
  xfer_listener_stats(l, &clients, &served, &dropped);
  lua_createtable(L, 0, 5);
  lua_pushnumber(L, (lua_Number)clients);
  lua_setfield(L, -2, "clients");
  lua_pushnumber(L, (lua_Number)served);
  lua_setfield(L, -2, "served");
  lua_pushnumber(L, (lua_Number)dropped);
  lua_setfield(L, -2, "dropped");
  lua_pushnumber(L, (lua_Number)xfer_listener_canceled(l));
  lua_setfield(L, -2, "canceled");
  xfer_registered r;
  xfer_listener_registered(l, &r);
  push_registered(L, &r);
  lua_setfield(L, -2, "registered");
  return 1;
}

static int listener_close(lua_State *L)
{
  listener_box *b = luaL_checkudata(L, 1, XL_LISTENER);
  xfer_listener *l = b->listener;
  b->listener = NULL;
  xfer_listener_close(l);
  return 0;
}

static int listener_tostring(lua_State *L)
{
  listener_box *b = luaL_checkudata(L, 1, XL_LISTENER);
  if (b->listener) lua_pushfstring(L, "xfer.Listener(%s)", xfer_listener_url(b->listener));
  else lua_pushliteral(L, "xfer.Listener(closed)");
  return 1;
}

/* listener.url (where it listens: the port chosen for port 0), else its methods (upvalue) */
static int listener_index(lua_State *L)
{
  const char *key = lua_tostring(L, 2);
  if (key && !strcmp(key, "url")) {
    lua_pushstring(L, xfer_listener_url(check_listener(L, "url")));
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

void xl_open_remote(lua_State *L, int module)
{
  if (luaL_newmetatable(L, XL_PEER)) {
    lua_createtable(L, 0, (int)(sizeof peer_fields / sizeof peer_fields[0]));
    for (size_t i = 0; i < sizeof peer_fields / sizeof peer_fields[0]; i++) {
      lua_pushinteger(L, (lua_Integer)i);
      lua_setfield(L, -2, peer_fields[i].key);
    }
    lua_pushcclosure(L, peer_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, xl_read_only);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, peer_close);
    lua_setfield(L, -2, "close");
    lua_pushcfunction(L, peer_set_timeout);
    lua_setfield(L, -2, "set_timeout");
    lua_pushcfunction(L, peer_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, peer_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, XL_LISTENER)) {
    static const luaL_Reg methods[] = {{"progress", listener_progress}, {"stats", listener_stats},
                                       {"close", listener_close}, {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_pushcclosure(L, listener_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, listener_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, listener_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_connect);
  lua_setfield(L, module, "connect");
  lua_pushcfunction(L, l_listen);
  lua_setfield(L, module, "listen");
}
