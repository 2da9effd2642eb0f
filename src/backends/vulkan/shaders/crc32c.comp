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
        // 64 bytes at a time while 64 are left, the next 64 asked for before these are summed:
        // whole sectors a load, twice the bytes in flight (cuda_crc.c says why)
        uint at4 = p >> 4;
        uvec4 a0 = uvec4(0u), a1 = uvec4(0u), a2 = uvec4(0u), a3 = uvec4(0u);
        if (span >= 64u) {
          a0 = quads[at4]; a1 = quads[at4 + 1u]; a2 = quads[at4 + 2u]; a3 = quads[at4 + 3u];
        }
        for (; k + 64u <= span; k += 64u) {
          uvec4 b0 = uvec4(0u), b1 = uvec4(0u), b2 = uvec4(0u), b3 = uvec4(0u);
          if (k + 128u <= span) {
            uint n = at4 + (k >> 4) + 4u;
            b0 = quads[n]; b1 = quads[n + 1u]; b2 = quads[n + 2u]; b3 = quads[n + 3u];
          }
          c = sum_quad(sum_quad(sum_quad(sum_quad(c, a0, col), a1, col), a2, col), a3, col);
          a0 = b0; a1 = b1; a2 = b2; a3 = b3;
        }
        for (; k < span; k += 16u) c = sum_quad(c, quads[(p + k) >> 4], col);
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
