-- The Redis server's clock, so every process's deadlines agree whatever its own clock says.
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

-- Numbers above 1e14 lose digits in Lua's default formatting: always format them with this.
local function str(n)
  return string.format('%.0f', n)
end
