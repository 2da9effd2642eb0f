// crc32c.comp -- the CRC32C of pieces of a buffer, one workgroup per piece (vulkan_crc.c): as
// CUDA's and OpenCL's kernels, each of 256 invocations sums a stretch of the piece by the byte
// table (shared memory), then they join their sums in a tree (a shift past n bytes: a product
// by x^(8n), composed from x^(8 * 2^j), which the host gives after the byte table).
#version 450
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer Bytes { uint words[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pieces { uvec2 piece[]; }; // offset, length
layout(std430, set = 0, binding = 2) readonly buffer Table { uint table[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Sums { uint sums[]; };
layout(push_constant) uniform Base { uint first; }; // the dispatch's first piece

shared uint tab[256];
shared uint pw[32];
shared uint part[256];

// a * b modulo the polynomial, both reflected (bit 31 the x^0 term)
uint crc_mult(uint a, uint b)
{
  uint p = 0u;
  for (int i = 0; i < 32; i++) {
    p ^= b & uint(-int(a >> 31));
    a <<= 1;
    b = (b >> 1) ^ (0x82F63B78u & uint(-int(b & 1u)));
  }
  return p;
}

uint byte_at(uint at) { return (words[at >> 2] >> ((at & 3u) * 8u)) & 255u; }

void main()
{
  uint t = gl_LocalInvocationID.x, g = first + gl_WorkGroupID.x;
  tab[t] = table[t];
  if (t < 32u) pw[t] = table[256u + t];
  barrier();
  uint at = piece[g].x, len = piece[g].y;
  uint sub = (((len + 255u) >> 8) + 15u) & ~15u, from = t * sub;
  uint c = 0u;
  if (from < len) {
    uint span = min(len - from, sub), k = 0u, p = at + from;
    c = 0xffffffffu;
    if ((p & 3u) == 0u) {
      for (; k + 4u <= span; k += 4u) {
        c ^= words[(p + k) >> 2];
        c = (c >> 8) ^ tab[c & 255u];
        c = (c >> 8) ^ tab[c & 255u];
        c = (c >> 8) ^ tab[c & 255u];
        c = (c >> 8) ^ tab[c & 255u];
      }
    }
    for (; k < span; k++) c = (c >> 8) ^ tab[(c ^ byte_at(p + k)) & 255u];
    c = ~c;
  }
  part[t] = c;
  barrier();
  for (uint s = 1u; s < 256u; s <<= 1) {
    uint after = (t + s) * sub;
    if ((t & (2u * s - 1u)) == 0u && after < len) {
      uint n = min(len - after, s * sub), x = 0x80000000u;
      for (uint j = 0u; n != 0u; j++, n >>= 1)
        if ((n & 1u) != 0u) x = crc_mult(x, pw[j]);
      part[t] = crc_mult(x, part[t]) ^ part[t + s];
    }
    barrier();
  }
  if (t == 0u) sums[g] = part[0];
}
