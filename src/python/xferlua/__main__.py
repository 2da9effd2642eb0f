"""python -m xferlua --devices: what xferlua sees here (a first command after installing)."""
import sys

import xferlua

USAGE = """usage: python -m xferlua [--devices | --version | --help]
  --devices   the runtimes, and the devices each offers (or why it offers none)
  --version   xferlua's version and where its library was loaded from"""


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "--version":
        print("xferlua %s (%s)" % (xferlua.__version__, xferlua.library_path))
        return 0
    if argv[0] != "--devices":
        print("python -m xferlua: unknown argument '%s'\n%s" % (argv[0], USAGE), file=sys.stderr)
        return 2
    print("xferlua %s (%s)" % (xferlua.__version__, xferlua.library_path))
    for r in xferlua.runtimes():
        state = "available" if r["available"] else "unavailable"
        why = (": " + r["reason"]) if r["reason"] else ""
        print("%-8s %s, %d device(s)%s" % (r["name"], state, r["devices"], why))
    for d in xferlua.devices():
        print("  %-10s %s, %.1f GiB%s" % (d, d.label, d.total_memory / 2**30,
                                           ", backed by " + d.backing if d.backing else ""))
    return 0


sys.exit(main(sys.argv[1:]))
