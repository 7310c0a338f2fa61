/* bootsect.S: a test guest whose RAM proves a live migration kept it whole.
 *
 * A boot sector (SeaBIOS loads it at 0x7c00) that switches to flat 32-bit
 * protected mode, writes the line "rdmig-guest" to COM1 and then, forever,
 * walks the 4 KiB pages of [1 MiB, 101 MiB) in ascending order,
 * incrementing the byte at offset 0 of each, and writes one 'B' to COM1
 * after every full pass.  So at any stop all pages hold the same count,
 * except that the pages the current pass has already reached hold one more:
 * `guestcheck ram` checks exactly that, and a migration that lost a dirty
 * page or delivered a stale one breaks it.
 *
 * Image layout (offsets into the 512-byte sector; `guestcheck image` edits
 * the parameter, so nobody reassembles to change it):
 *   0x000  2 bytes  short jmp over the parameter block
 *   0x002  8 bytes  magic "RDMIGDLY"
 *   0x00a  4 bytes  delay, little-endian u32: iterations of a two-instruction
 *                   busy loop (dec, jnz) run after each page; 0 = no pause.
 *                   It sets the dirty rate.  The guest reads it from its
 *                   loaded copy (address 0x7c0a) before every pause.
 *   0x00e  4 bytes  end of the range, little-endian u32 (0 = 101 MiB): a
 *                   guest that rewrites less memory, faster, for tests that
 *                   need a busy guest and little data.
 *   0x1fe  2 bytes  0x55 0xaa
 *
 * The RAM range must start zero-filled (a new memory-backend file): the
 * counts are only consistent if every page starts from the same value.
 *
 * Build: as --32, then ld -m elf_i386 -Ttext 0x7c00 --oformat binary. */

	.equ	PAGE_SIZE, 0x1000
	.equ	RANGE_START, 0x00100000	/* 1 MiB: above the BIOS and VGA holes */
	.equ	RANGE_END, 0x06500000	/* 101 MiB: below SeaBIOS's tables at the top of 128 MiB */
	.equ	COM1, 0x3f8
	.equ	SEL_CODE, 0x08
	.equ	SEL_DATA, 0x10

	.code16
	.text
	.globl	_start
_start:
	jmp	real_start

	/* .org fails the build if the jmp ever grows past two bytes. */
	.org	0x002
	.ascii	"RDMIGDLY"
	.org	0x00a
delay:
	.long	0
	.org	0x00e
end:
	.long	0

real_start:
	cli
	cld			/* lodsb below walks forwards */
	/* Some BIOSes enter at 07c0:0000; make CS 0 so our absolute
	 * addresses hold. */
	ljmp	$0, $1f
1:
	xorw	%ax, %ax
	movw	%ax, %ds
	movw	%ax, %ss
	movw	$0x7c00, %sp

	/* A20 through the "fast A20" port; bit 0 would reset the machine. */
	inb	$0x92, %al
	orb	$0x02, %al
	andb	$0xfe, %al
	outb	%al, $0x92

	lgdt	gdt_desc
	movl	%cr0, %eax
	orl	$1, %eax
	movl	%eax, %cr0
	/* The far jump loads CS from the GDT and flushes real-mode decoding. */
	ljmp	$SEL_CODE, $protected

	.code32
protected:
	movw	$SEL_DATA, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movw	%ax, %ss
	movl	$0x7c00, %esp
	movw	$COM1, %dx
	/* No end given: the default range. */
	cmpl	$0, end
	jne	1f
	movl	$RANGE_END, end
1:

	/* SeaBIOS's own banner contains 'B's; a line of ours tells tests
	 * where the markers start. */
	movl	$banner, %esi
say:
	lodsb
	testb	%al, %al
	jz	said
	outb	%al, %dx
	jmp	say
said:
	movb	$'B', %al

pass:
	movl	$RANGE_START, %ebx
page:
	incb	(%ebx)
	movl	delay, %ecx
	/* Test first: dec from 0 would spin 2^32 times. */
	testl	%ecx, %ecx
	jz	next
spin:
	decl	%ecx
	jnz	spin
next:
	addl	$PAGE_SIZE, %ebx
	cmpl	end, %ebx
	jb	page
	outb	%al, %dx
	jmp	pass

banner:
	.asciz	"\r\nrdmig-guest\r\n"

	/* Flat 4 GiB segments: base 0, limit 0xfffff in 4 KiB units. */
	.p2align 3
gdt:
	.quad	0
	.quad	0x00cf9a000000ffff	/* SEL_CODE: 32-bit code, read/execute */
	.quad	0x00cf92000000ffff	/* SEL_DATA: 32-bit data, read/write */
gdt_desc:
	.word	gdt_desc - gdt - 1
	.long	gdt

	.org	0x1fe
	.byte	0x55, 0xaa
