"""VHDL functions the generated architecture declares for itself.

They are declared in the architecture (not a package) so that several generated designs can
share one work library. Every name starts with :data:`names.HELPER_PREFIX`, which no
generated signal name does.
"""

__all__ = ["HELPERS"]


HELPERS = """\
  -- A boolean or a bit as a vh_w-bit vector (zero-extended).
  function vh_bool(vh_b : boolean; vh_w : positive) return bit_vector is
    variable vh_r : bit_vector(vh_w - 1 downto 0) := (others => '0');
  begin
    if vh_b then
      vh_r(0) := '1';
    end if;
    return vh_r;
  end function;

  function vh_bit(vh_b : bit; vh_w : positive) return bit_vector is
    variable vh_r : bit_vector(vh_w - 1 downto 0) := (others => '0');
  begin
    vh_r(0) := vh_b;
    return vh_r;
  end function;

  -- vh_a where vh_b holds, else zeros.
  function vh_mask(vh_a : bit_vector; vh_b : boolean) return bit_vector is
  begin
    if vh_b then
      return vh_a;
    end if;
    return (vh_a'length - 1 downto 0 => '0');
  end function;

  -- The value of vh_b (two's complement when vh_sgn), clamped to [-vh_lim, vh_lim]:
  -- a shift amount of any width, without overflowing integer.
  function vh_amount(vh_b : bit_vector; vh_sgn : boolean; vh_lim : natural)
      return integer is
    constant vh_n : bit_vector(vh_b'length - 1 downto 0) := vh_b;
    variable vh_r : integer := 0;
  begin
    for vh_i in vh_n'range loop
      if vh_sgn and vh_i = vh_n'high then
        if vh_n(vh_i) = '1' then
          vh_r := -1;
        end if;
      else
        vh_r := 2 * vh_r;
        if vh_n(vh_i) = '1' then
          vh_r := vh_r + 1;
        end if;
      end if;
      if vh_r > vh_lim then
        return vh_lim;
      elsif vh_r < -vh_lim then
        return -vh_lim;
      end if;
    end loop;
    return vh_r;
  end function;

  -- vh_w bits of vh_a from bit vh_amt on (vh_amt < 0 shifts left); bits outside vh_a are '0'.
  function vh_shift(vh_a : bit_vector; vh_amt : integer; vh_w : positive)
      return bit_vector is
    constant vh_n : bit_vector(vh_a'length - 1 downto 0) := vh_a;
    variable vh_r : bit_vector(vh_w - 1 downto 0) := (others => '0');
  begin
    for vh_i in vh_r'range loop
      if vh_i + vh_amt >= 0 and vh_i + vh_amt < vh_n'length then
        vh_r(vh_i) := vh_n(vh_i + vh_amt);
      end if;
    end loop;
    return vh_r;
  end function;

  -- Truncating (vh_flr false) or flooring division of equal-length vh_a, vh_b; low vh_w bits.
  -- Division by zero gives 0 (Yosys leaves it undefined).
  function vh_div(vh_a, vh_b : bit_vector; vh_sgn, vh_flr : boolean; vh_w : positive)
      return bit_vector is
    constant vh_n : positive := vh_a'length + 1;
    variable vh_q, vh_r : signed(vh_n - 1 downto 0);
  begin
    if unsigned(vh_b) = 0 then
      return (vh_w - 1 downto 0 => '0');
    end if;
    if vh_sgn then
      vh_q := resize(signed(vh_a), vh_n) / resize(signed(vh_b), vh_n);
      vh_r := resize(signed(vh_a), vh_n) rem resize(signed(vh_b), vh_n);
      if vh_flr and vh_r /= 0 and ((vh_r < 0) /= (signed(vh_b) < 0)) then
        vh_q := vh_q - 1;
      end if;
    else
      vh_q := signed(resize(unsigned(vh_a) / unsigned(vh_b), vh_n));
    end if;
    return bit_vector(vh_q(vh_w - 1 downto 0));
  end function;

  -- Remainder (sign of vh_a) or floored modulo (sign of vh_b), equal lengths; low vh_w bits.
  -- Modulo by zero gives 0 (Yosys leaves it undefined).
  function vh_mod(vh_a, vh_b : bit_vector; vh_sgn, vh_flr : boolean; vh_w : positive)
      return bit_vector is
    constant vh_n : positive := vh_a'length + 1;
    variable vh_r : signed(vh_n - 1 downto 0);
  begin
    if unsigned(vh_b) = 0 then
      return (vh_w - 1 downto 0 => '0');
    end if;
    if vh_sgn and vh_flr then
      vh_r := resize(signed(vh_a), vh_n) mod resize(signed(vh_b), vh_n);
    elsif vh_sgn then
      vh_r := resize(signed(vh_a), vh_n) rem resize(signed(vh_b), vh_n);
    else
      vh_r := signed(resize(unsigned(vh_a) rem unsigned(vh_b), vh_n));
    end if;
    return bit_vector(vh_r(vh_w - 1 downto 0));
  end function;
"""
