# src/attn_sp: reference attention, ring attention, nested attention
