// crc32c.comp -- the CRC32C of pieces of a buffer, the workgroups walking them (vulkan_crc.c), as
// CUDA's and OpenCL's kernels: a piece summed right-aligned, invocation t summing bytes
// [st - pad, st - pad + s) of it (s the stretch: 256 bytes, 64 or 16 for a call of small
// ranges; pad = 256s - its length) as a raw register (from 0, no inversion), which zero bytes
// in front leave as it is, so that the tree joins stretches by fixed shifts (four lookups in
// tables the host gives after the byte table, the stretch's at shifts_at). The
// byte table lies in shared memory once per lane of COLS (a specialization constant: 32 where
// the device's shared memory holds it, fewer where not), so that lookups of a subgroup fall in
// separate banks. The host joins a piece's raw registers and turns them into the CRC.
#version 450
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint COLS = 32u;
layout(std430, set = 0, binding = 0) readonly buffer Bytes { uint words[]; };
// the same bytes 16 at a time (one load where four were: 522 GB/s against CUDA's 950 on the
// H100 when words were read singly; 670 with 16)
layout(std430, set = 0, binding = 0) readonly buffer Quads { uvec4 quads[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pieces { uvec2 piece[]; }; // offset, length
layout(std430, set = 0, binding = 2) readonly buffer Table { uint table[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Sums { uint sums[]; };
layout(push_constant) uniform Push { uint count; uint stretch; uint shifts_at; }; // the pieces, ...

shared uint tab[256u * COLS];
shared uint part[256];

uint byte_at(uint at) { return (words[at >> 2] >> ((at & 3u) * 8u)) & 255u; }

// c carried past the 16 bytes of w
uint sum_quad(uint c, uvec4 w, uint col)
{
  for (uint q = 0u; q < 4u; q++) {
    c ^= w[q];
    c = (c >> 8) ^ tab[(c & 255u) * COLS + col];
    c = (c >> 8) ^ tab[(c & 255u) * COLS + col];
    c = (c >> 8) ^ tab[(c & 255u) * COLS + col];
    c = (c >> 8) ^ tab[(c & 255u) * COLS + col];
  }
  return c;
}

void main()
{
  uint t = gl_LocalInvocationID.x, col = t & (COLS - 1u);
  uint v = table[t];
  for (uint l = 0u; l < COLS; l++) tab[t * COLS + ((l + t) & (COLS - 1u))] = v;
  barrier();
  for (uint g = gl_WorkGroupID.x; g < count; g += gl_NumWorkGroups.x) {
    uint at = piece[g].x, len = piece[g].y;
    int beg = int(t * stretch + len) - int(256u * stretch), end = beg + int(stretch);
    uint c = 0u;
    if (end > 0) {
      uint from = uint(max(beg, 0)), span = uint(end) - from, k = 0u, p = at + from;
      if (((p | span) & 15u) == 0u) {
        // 16 bytes at a time, the next 16 asked for before these are summed (64 at a time, as
        // CUDA's and OpenCL's kernels read, summed 3-4% slower here: 665-677 GB/s against
        // 694-702 on the H100 and the H200, 2026-12-07)
        uvec4 w = quads[p >> 4];
        for (; k < span; k += 16u) {
          uvec4 next = k + 16u < span ? quads[(p + k + 16u) >> 4] : uvec4(0u);
          c = sum_quad(c, w, col);
          w = next;
        }
      }
      for (; k < span; k++) {
        c ^= byte_at(p + k);
        c = (c >> 8) ^ tab[(c & 255u) * COLS + col];
      }
    }
    part[t] = c;
    barrier();
    uint sh = shifts_at;
    for (uint s = 1u; s < 256u; s <<= 1, sh += 1024u) {
      if ((t & (2u * s - 1u)) == 0u) {
        uint r = part[t];
        part[t] = table[sh + (r & 255u)] ^ table[sh + 256u + ((r >> 8) & 255u)] ^
                  table[sh + 512u + ((r >> 16) & 255u)] ^ table[sh + 768u + (r >> 24)] ^ part[t + s];
      }
      barrier();
    }
    if (t == 0u) sums[g] = part[0];
    barrier(); // part[0] read before the next piece's stretches overwrite it
  }
}
