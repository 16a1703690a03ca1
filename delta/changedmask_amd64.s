//go:build amd64 && !purego

#include "textflag.h"

// func changedMask16(base, cur *byte, groups int, mask *uint64)
//
// Each mask word covers 64 two-byte elements (128 bytes), in two halves of 32. For a half:
// VPCMPEQW sets a word of all ones where base and cur are equal; VPACKSSWB narrows the words
// to bytes (0xFFFF saturates to 0xFF), interleaving the 128-bit lanes of its two sources;
// VPERMQ puts the four 8-byte runs back in element order; VPMOVMSKB gathers one bit per
// element, and its complement is the changed bit.
TEXT ·changedMask16(SB), NOSPLIT, $0-32
	MOVQ base+0(FP), SI
	MOVQ cur+8(FP), DI
	MOVQ groups+16(FP), CX
	MOVQ mask+24(FP), R8
	TESTQ CX, CX
	JZ   done

loop:
	VMOVDQU   0(SI), Y0
	VMOVDQU   32(SI), Y1
	VMOVDQU   64(SI), Y2
	VMOVDQU   96(SI), Y3
	VPCMPEQW  0(DI), Y0, Y0
	VPCMPEQW  32(DI), Y1, Y1
	VPCMPEQW  64(DI), Y2, Y2
	VPCMPEQW  96(DI), Y3, Y3
	VPACKSSWB Y1, Y0, Y0
	VPACKSSWB Y3, Y2, Y2
	VPERMQ    $0xD8, Y0, Y0
	VPERMQ    $0xD8, Y2, Y2
	VPMOVMSKB Y0, AX
	VPMOVMSKB Y2, BX
	NOTL      AX
	NOTL      BX
	MOVL      AX, 0(R8)
	MOVL      BX, 4(R8)
	ADDQ      $128, SI
	ADDQ      $128, DI
	ADDQ      $8, R8
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET
