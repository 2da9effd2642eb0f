-- Two GPUs that CUDA joins (issue 39: the nvidia-h200-x2 machine, two H200s over NVLink): a
-- batch between them is one submission of the source's CUDA kernel over the other GPU's memory
-- (peer access on), for CUDA's own devices and for OpenCL devices living in CUDA's memory.
-- Tagged #two_gpus; pending, with the reason, on a machine with fewer.
local xfer = require "xfer"
local h = require "support.helpers"

-- the devices of `runtime` on distinct CUDA GPUs, by UUID: the first two, or nil
local function two_of(runtime)
  local gpus, seen, out = {}, {}, {}
  for _, d in ipairs(xfer.devices()) do
    if d.runtime == "cuda" and d.uuid then gpus[d.uuid] = true end
  end
  for _, d in ipairs(xfer.devices()) do
    if d.runtime == runtime and d.uuid and gpus[d.uuid] and not seen[d.uuid] then
      seen[d.uuid] = true
      out[#out + 1] = d
    end
  end
  if #out >= 2 then return out[1], out[2] end
end

-- where two GPUs are not here, why
local function missing(runtime)
  local n = 0
  for _, d in ipairs(xfer.devices()) do
    if d.runtime == "cuda" then n = n + 1 end
  end
  if n < 2 then return ("two CUDA GPUs needed (here: %d): the nvidia-h200-x2 machine"):format(n) end
  if not two_of(runtime) then return runtime .. " has no device on each GPU here" end
end

describe("two GPUs #two_gpus", function()
  for _, runtime in ipairs({ "cuda", "opencl" }) do
    it(runtime .. ": a batch of blocks between the GPUs is one submission over the other's memory, both ways", function()
      local why = missing(runtime)
      if why then return pending(why) end
      local a, b = two_of(runtime)
      for _, pair in ipairs({ { a, b }, { b, a } }) do
        for _, shape in ipairs({ { 16384, 4099, 4096 }, { 262144, 1031, 1024 } }) do
          local made = h.scattered_batch(pair[1], pair[2], shape[1], shape[2], shape[3])
          made.batch:run()
          assert.is_nil(made.check(made.dst:tobytes()), pair[1].name .. " -> " .. pair[2].name)
          assert.are.equal(1, made.batch.at_once, pair[1].name .. " -> " .. pair[2].name)
          made.batch:run() -- a prepared batch's later runs: the kernel's table kept on the device
          assert.is_nil(made.check(made.dst:tobytes()))
        end
      end
    end)
  end

  it("copy_many across the GPUs moves every pair, verified", function()
    local why = missing("cuda")
    if why then return pending(why) end
    local a, b = two_of("cuda")
    local pairs, want = {}, {}
    for i = 1, 64 do
      local bytes = h.random_bytes(4096 + i)
      want[i] = bytes
      pairs[i] = { xfer.zeros({ #bytes }, { dtype = "u8", device = b }), xfer.tensor(bytes, { dtype = "u8", device = a }) }
    end
    xfer.copy_many(pairs, { verify = true })
    for i = 1, 64 do assert.are.equal(want[i], pairs[i][1]:tobytes(), "pair " .. i) end
  end)
end)
